#!/usr/bin/env python3
"""llama.cpp side of the engine throughput benchmark (run by bench/engine_bench.sh inside its
venv, where llama-cpp-python is installed). Measures what bench/engine_throughput.cc measures,
through llama.cpp's low-level C API (llama_batch / llama_decode via ctypes):

  prefill: per repetition the context memory is cleared and the N prompt ids are decoded in
           llama_batch chunks of --batch tokens, logits requested for the last token of each
           chunk only; tok/s = N / time of the llama_decode calls.
  decode:  per repetition the memory is cleared, the prompt (the depth, may be 0) is decoded
           untimed, then --decode single-token llama_decode calls are timed, each token the
           greedy argmax of the previous logits (at depth 0 the first one is the first id the
           seed draws).

Same ids as the C++ side: splitmix64 from --seed, each id modulo min(2000, n_vocab); the summary
carries their FNV-1a hash for the script to compare. Context: n_ctx = prompt + decode rounded
up to 256, n_batch = n_ubatch = --batch (512), n_threads = n_threads_batch = --threads, one
sequence, everything else llama_context_default_params(): KV cache type_k = type_v = f16,
flash_attn_type auto (llama.cpp decides; its choice is in the log line on stderr and in the
summary), weights memory-mapped (use_mmap default). One untimed warm-up decode of the first
chunk (prefill) or one token (decode) before the timed repetitions.

stdout: one JSON object per repetition and a JSON summary ("summary": true) with the median,
peak RSS (getrusage ru_maxrss), the interpreter's peak RSS before the model was loaded
(baseline: Python, numpy and the llama.cpp shared libraries; net = peak - baseline) and the CPU
seconds the process used.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import llama_cpp as ll

from llama_cpp_common import (QuietModel, cpu_seconds, fnv1a_ids, peak_rss_mb,
                              prompt_ids)


class Runner:
    """One model, one context, one preallocated llama_batch."""

    def __init__(self, args):
        self.args = args
        self.loaded = QuietModel(args.model)
        self.log_lines = self.loaded.log_lines
        self.model, self.vocab, self.n_vocab = (self.loaded.model, self.loaded.vocab,
                                                self.loaded.n_vocab)

        n_tokens = args.prompt + (args.decode if args.scenario == "decode" else 0)
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = max(256, (n_tokens + 255) // 256 * 256)
        cparams.n_batch = args.batch
        cparams.n_ubatch = args.batch
        cparams.n_seq_max = 1
        cparams.n_threads = args.threads
        cparams.n_threads_batch = args.threads
        cparams.no_perf = True
        self.type_k, self.type_v = cparams.type_k, cparams.type_v
        self.flash_attn_type = cparams.flash_attn_type
        self.n_ctx = cparams.n_ctx
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise SystemExit("llama.cpp could not create a context")
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(args.batch, 0, 1)

    def close(self):
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)

    def clear(self):
        ll.llama_memory_clear(self.memory, True)

    def fill(self, ids, first_pos):
        b = self.batch
        b.n_tokens = len(ids)
        for i, token in enumerate(ids):
            b.token[i] = token
            b.pos[i] = first_pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 0
        b.logits[len(ids) - 1] = 1

    def decode(self):
        """Runs the filled batch; returns the seconds spent in llama_decode."""
        start = time.perf_counter()
        rc = ll.llama_decode(self.ctx, self.batch)
        seconds = time.perf_counter() - start
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        return seconds

    def prefill(self, ids, first_pos=0):
        seconds = 0.0
        for begin in range(0, len(ids), self.args.batch):
            chunk = ids[begin:begin + self.args.batch]
            self.fill(chunk, first_pos + begin)
            seconds += self.decode()
        return seconds

    def argmax(self):
        logits = ll.llama_get_logits_ith(self.ctx, -1)
        return int(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).argmax())


def main():
    parser = argparse.ArgumentParser(description="llama.cpp prefill/decode throughput")
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--scenario", choices=["prefill", "decode"], required=True)
    parser.add_argument("--prompt", type=int, required=True)
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    if args.reps < 1 or args.batch < 1 or args.decode < 1 or args.threads < 1:
        parser.error("--reps, --batch, --decode and --threads want positive integers")
    if args.prompt < (1 if args.scenario == "prefill" else 0):
        parser.error("--prompt: prefill needs >= 1, decode >= 0")

    baseline_rss = peak_rss_mb()
    runner = Runner(args)
    ids = prompt_ids(args.prompt, args.seed, runner.n_vocab)
    first_id = prompt_ids(1, args.seed, runner.n_vocab)
    prefill = args.scenario == "prefill"
    print(f"llama.cpp {ll.__version__}: {args.model}, {args.scenario} prompt={args.prompt}"
          f"{'' if prefill else f' decode={args.decode}'}, {args.threads} threads, "
          f"{args.reps} reps, n_ctx={runner.n_ctx}", file=sys.stderr)

    for _ in range(args.warmup):
        runner.clear()
        runner.prefill(ids[:args.batch] if prefill else first_id)

    rates, depth_seconds = [], 0.0
    for rep in range(1, args.reps + 1):
        runner.clear()
        if prefill:
            seconds = runner.prefill(ids)
            tokens = args.prompt
        else:
            next_token = first_id[0]
            if args.prompt > 0:
                depth_seconds = runner.prefill(ids)
                next_token = runner.argmax()
            seconds = 0.0
            for step in range(args.decode):
                runner.fill([next_token], args.prompt + step)
                seconds += runner.decode()
                next_token = runner.argmax()
            tokens = args.decode
        tok_s = tokens / max(seconds, 1e-12)
        rates.append(tok_s)
        print(json.dumps({"engine": "llama.cpp", "scenario": args.scenario,
                          "prompt": args.prompt, "decode": 0 if prefill else args.decode,
                          "rep": rep, "tokens": tokens, "seconds": round(seconds, 6),
                          "tok_s": round(tok_s, 3)}, separators=(",", ":")), flush=True)
        print(f"  rep {rep}/{args.reps}: {tok_s:.2f} tok/s", file=sys.stderr)

    model_size = ll.llama_model_size(runner.model)
    runner.close()
    type_names = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}
    flash_attn = {-1: "auto", 0: "disabled", 1: "enabled"}.get(runner.flash_attn_type, "?")
    for line in runner.log_lines:
        if "Flash Attention enabled" in line:
            flash_attn += " (enabled)"
        elif "Flash Attention disabled" in line:
            flash_attn += " (disabled)"
    summary = {
        "summary": True, "engine": "llama.cpp", "version": ll.__version__,
        "scenario": args.scenario, "prompt": args.prompt,
        "decode": 0 if prefill else args.decode, "batch": args.batch, "threads": args.threads,
        "reps": args.reps, "median_tok_s": round(statistics.median(rates), 3),
        "min_tok_s": round(min(rates), 3), "max_tok_s": round(max(rates), 3),
        "depth_prefill_seconds": round(depth_seconds, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1), "baseline_rss_mb": round(baseline_rss, 1),
        "cpu_seconds": round(cpu_seconds(), 2),
        "model_size_bytes": model_size, "n_ctx": runner.n_ctx,
        "kv_type": f"{type_names.get(runner.type_k, runner.type_k)}/"
                   f"{type_names.get(runner.type_v, runner.type_v)}",
        "flash_attn": flash_attn, "llama_log": runner.log_lines,
        "ids_fnv1a": f"{fnv1a_ids(ids):016x}",
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
