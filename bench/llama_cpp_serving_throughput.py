#!/usr/bin/env python3
"""llama.cpp side of the serving throughput benchmark (run by bench/serving_bench.sh inside its
venv, where llama-cpp-python is installed). Measures what bench/serving_throughput.cc measures,
with N parallel sequences in one llama.cpp context through the low-level C API (llama_batch /
llama_decode via ctypes), the way llama-server's parallel slots drive it:

  prefill: per repetition the context memory is cleared and the N prompts (sequence ids 0..N-1)
           go into one llama_batch (n_batch = max(512, N * P); llama.cpp splits it into ubatches
           of n_ubatch = 512), logits for each prompt's last token; each sequence's first token is
           the argmax of those. Prefill tok/s = N * P / (llama_decode + argmax time).
  decode:  max_tokens - 1 steps, each one llama_batch with one token per sequence (its previous
           greedy token, at its own position), one llama_decode, and the argmax of the N logits
           rows (one numpy call). Aggregate tok/s = N * (max_tokens - 1) / the time of those steps;
           per-sequence tok/s = aggregate / N (the sequences advance in lockstep).

Same prompts as the C++ side's random workload: sequence i gets P ids drawn with splitmix64 from
seed + i, each modulo min(2000, n_vocab); the summary carries the FNV-1a hash of all of them (in
sequence order) and every sequence's generated ids. Context: n_seq_max = N, n_ctx = N * (P +
max_tokens rounded up to 256) (kv_unified false, the default: each sequence gets its own n_ctx / N
slice), n_threads = n_threads_batch = --threads, everything else llama_context_default_params():
KV cache f16/f16, flash_attn_type auto, weights memory-mapped. One untimed warm-up (an 8-token
prompt and one decode step on sequence 0) before the timed repetitions.

stdout: one JSON object per repetition and a JSON summary ("summary": true) with the medians,
peak RSS (ru_maxrss), the interpreter's RSS before the model was loaded and the CPU seconds used.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import llama_cpp as ll

from llama_cpp_common import (FNV_OFFSET, QuietModel, cpu_seconds, fnv1a_ids, peak_rss_mb,
                              prompt_ids)


class Runner:
    """One model, one context with N sequences, one preallocated llama_batch."""

    def __init__(self, args):
        self.args = args
        self.loaded = QuietModel(args.model)
        self.log_lines = self.loaded.log_lines
        self.model, self.vocab, self.n_vocab = (self.loaded.model, self.loaded.vocab,
                                                self.loaded.n_vocab)

        n = args.sequences
        per_seq = max(256, (args.prompt + args.max_tokens + 255) // 256 * 256)
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n * per_seq
        cparams.n_batch = max(512, n * args.prompt)
        cparams.n_seq_max = n
        cparams.n_threads = args.threads
        cparams.n_threads_batch = args.threads
        cparams.no_perf = True
        self.type_k, self.type_v = cparams.type_k, cparams.type_v
        self.flash_attn_type = cparams.flash_attn_type
        self.kv_unified = bool(cparams.kv_unified)
        self.n_ctx, self.n_batch, self.n_ubatch = cparams.n_ctx, cparams.n_batch, cparams.n_ubatch
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise SystemExit("llama.cpp could not create a context")
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(self.n_batch, 0, 1)

    def close(self):
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)

    def clear(self):
        ll.llama_memory_clear(self.memory, True)

    def fill(self, entries):
        """entries: (seq_id, first_pos, ids); logits for the last id of each entry."""
        b = self.batch
        i = 0
        for seq, first_pos, ids in entries:
            for j, token in enumerate(ids):
                b.token[i] = token
                b.pos[i] = first_pos + j
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = 1 if j == len(ids) - 1 else 0
                i += 1
        b.n_tokens = i

    def decode_argmax(self, n_rows):
        """Runs the filled batch; the greedy token of each of its n_rows logits rows."""
        rc = ll.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        logits = np.ctypeslib.as_array(ll.llama_get_logits(self.ctx), shape=(n_rows, self.n_vocab))
        return logits.argmax(axis=1).tolist()


def main():
    parser = argparse.ArgumentParser(description="llama.cpp parallel-sequence decode throughput")
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--sequences", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    if min(args.reps, args.sequences, args.prompt, args.threads) < 1 or args.max_tokens < 2:
        parser.error("--reps, --sequences, --prompt, --threads want >= 1, --max-tokens >= 2")

    baseline_rss = peak_rss_mb()
    runner = Runner(args)
    n = args.sequences
    prompts = [prompt_ids(args.prompt, args.seed + i, runner.n_vocab) for i in range(n)]
    ids_hash = FNV_OFFSET
    for p in prompts:
        ids_hash = fnv1a_ids(p, ids_hash)
    print(f"llama.cpp {ll.__version__}: {args.model}, {n} sequences, prompts of {args.prompt} "
          f"tokens, max_tokens={args.max_tokens}, {args.threads} threads, {args.reps} reps, "
          f"n_ctx={runner.n_ctx}, n_batch={runner.n_batch}", file=sys.stderr)

    for _ in range(args.warmup):
        runner.clear()
        warm = prompt_ids(8, args.seed, runner.n_vocab)
        runner.fill([(0, 0, warm)])
        token = runner.decode_argmax(1)[0]
        runner.fill([(0, len(warm), [token])])
        runner.decode_argmax(1)

    rates, per_seq_rates, prefill_rates = [], [], []
    outputs, out_hash, outputs_stable = None, None, True
    for rep in range(1, args.reps + 1):
        runner.clear()
        t0 = time.perf_counter()
        runner.fill([(i, 0, prompts[i]) for i in range(n)])
        last = runner.decode_argmax(n)
        t1 = time.perf_counter()
        generated = [[t] for t in last]
        for step in range(args.max_tokens - 1):
            runner.fill([(i, args.prompt + step, [last[i]]) for i in range(n)])
            last = runner.decode_argmax(n)
            for i in range(n):
                generated[i].append(last[i])
        t2 = time.perf_counter()
        decode_tokens = n * (args.max_tokens - 1)
        tok_s = decode_tokens / max(t2 - t1, 1e-12)
        prefill_tok_s = n * args.prompt / max(t1 - t0, 1e-12)
        rates.append(tok_s)
        per_seq_rates.append(tok_s / n)
        prefill_rates.append(prefill_tok_s)
        h = FNV_OFFSET
        for g in generated:
            h = fnv1a_ids(g, h)
        if outputs is None:
            outputs, out_hash = generated, h
        elif h != out_hash:
            outputs_stable = False
        print(json.dumps({"engine": "llama.cpp", "workload": "random", "sequences": n, "rep": rep,
                          "prompt_tokens": n * args.prompt,
                          "prefill_seconds": round(t1 - t0, 6),
                          "prefill_tok_s": round(prefill_tok_s, 3),
                          "decode_tokens": decode_tokens, "decode_seconds": round(t2 - t1, 6),
                          "decode_tok_s": round(tok_s, 3), "per_seq_tok_s": round(tok_s / n, 3),
                          "outputs_fnv1a": f"{h:016x}"}, separators=(",", ":")), flush=True)
        print(f"  rep {rep}/{args.reps}: decode {tok_s:.2f} tok/s ({tok_s / n:.2f} per sequence), "
              f"prefill {prefill_tok_s:.1f} tok/s", file=sys.stderr)

    runner.close()
    type_names = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}
    flash_attn = {-1: "auto", 0: "disabled", 1: "enabled"}.get(runner.flash_attn_type, "?")
    for line in runner.log_lines:
        if "Flash Attention enabled" in line:
            flash_attn += " (enabled)"
        elif "Flash Attention disabled" in line:
            flash_attn += " (disabled)"
    summary = {
        "summary": True, "engine": "llama.cpp", "version": ll.__version__, "workload": "random",
        "sequences": n, "prompt": args.prompt, "max_tokens": args.max_tokens,
        "threads": args.threads, "reps": args.reps,
        "median_decode_tok_s": round(statistics.median(rates), 3),
        "min_decode_tok_s": round(min(rates), 3), "max_decode_tok_s": round(max(rates), 3),
        "median_per_seq_tok_s": round(statistics.median(per_seq_rates), 3),
        "median_prefill_tok_s": round(statistics.median(prefill_rates), 3),
        "peak_rss_mb": round(peak_rss_mb(), 1), "baseline_rss_mb": round(baseline_rss, 1),
        "cpu_seconds": round(cpu_seconds(), 2), "n_ctx": runner.n_ctx, "n_batch": runner.n_batch,
        "n_ubatch": runner.n_ubatch, "kv_unified": runner.kv_unified,
        "kv_type": f"{type_names.get(runner.type_k, runner.type_k)}/"
                   f"{type_names.get(runner.type_v, runner.type_v)}",
        "flash_attn": flash_attn, "llama_log": runner.log_lines,
        "ids_fnv1a": f"{ids_hash:016x}", "outputs_fnv1a": f"{out_hash:016x}",
        "outputs_stable": outputs_stable, "outputs": outputs,
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
