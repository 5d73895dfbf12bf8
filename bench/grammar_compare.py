#!/usr/bin/env python3
"""DeltaServe's grammar engine beside llguidance (PyPI) on the JSON Schema corpus (issue 13).

Both engines get the same schemas (tests/data/json_schema_corpus, a seeded sample), the same
vocabulary (a GGUF's byte-level BPE: llguidance gets it as a Hugging Face tokenizer.json built
from the GGUF's tokens and merges) and the same instances (hypothesis-jsonschema, validated with
jsonschema, written compact with sorted keys: the text deltaserve-bench-grammar walks). Reported:

  support   which schemas each compiles (deltaserve-grammar compile; llguidance's LLMatcher
            is_error), and how many of both, either, neither
  masks     per-token mask time over the instances: the first walk of each instance on a fresh
            matcher ("cold") and a second walk after reset ("warm": the engine's caches filled),
            thread CPU time (the machine is shared), p50 / p99 / mean
  compile   schema -> matcher time, p50 / p99

DeltaServe's numbers come from deltaserve-bench-grammar (--deltaserve-bench) run on the same
instances file; llguidance's from its Python binding (LLMatcher.compute_bitmask), which adds the
binding's call overhead (a few microseconds) to each mask.

    build/bench-venv/bin/pip install llguidance==1.9.1 tokenizers==0.23.3 gguf==0.19.0 \
        hypothesis==6.108.5 hypothesis-jsonschema==0.23.1 jsonschema==4.26.0
    build/bench-venv/bin/python bench/grammar_compare.py --model MODEL.gguf \
        --cli build/release/worker/deltaserve-grammar \
        --deltaserve-bench build/release/bench/deltaserve-bench-grammar --out build/bench/grammar
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration", "json_schema_corpus"))

import gguf  # noqa: E402
import llguidance  # noqa: E402
import numpy  # noqa: E402

import json_schema_corpus_check as corpus  # noqa: E402  (generation and validation helpers)

# The pre-tokenizer split of Qwen2 and Qwen3.5 ("qwen35": marks join letters), as llama.cpp and
# common/pre_tokenizer.cc apply it.
PRE_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
              r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
NORMAL = 1  # GGUF token types: 1 normal, 3 control, 4 user-defined, 5 unused, 6 byte


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def hf_tokenizer_json(model_path):
    """(tokenizer.json text, n_vocab, end-of-generation ids) for a GGUF's gpt2-style vocabulary."""
    r = gguf.GGUFReader(model_path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    pre = field(r, "tokenizer.ggml.pre")
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == NORMAL and t not in vocab:
            vocab[t] = i
        else:
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ty != 4})
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PRE_REGEX.get(pre, PRE_REGEX["qwen2"])},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": list(merges)},
    }
    end_texts = {"<|endoftext|>", "<|im_end|>"}
    ends = sorted({eos} | {i for i, t in enumerate(tokens) if t in end_texts})
    return json.dumps(doc), len(tokens), [eos] + [e for e in ends if e != eos]


def check_tokenizer(tok, golden_path):
    """Compares with llama.cpp's tokenizations (../shared/golden/tokenizer-*.json): mismatches."""
    with open(golden_path, encoding="utf-8") as f:
        golden = json.load(f)
    bad = 0
    for case in golden["cases"]:
        if "text" in case and "ids_plain" in case:
            if tok.tokenize_str(case["text"]) != case["ids_plain"]:
                bad += 1
    return bad, len(golden["cases"])


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(us):
    return {"p50": pct(us, 0.5), "p99": pct(us, 0.99),
            "mean": statistics.fmean(us) if us else float("nan"), "n": len(us)}


def run_llguidance(tok, cases):
    """Compile and walk every case with llguidance; per-schema support and the timings."""
    compile_us, cold, warm, cold_wall, warm_wall, support, errors = [], [], [], [], [], {}, {}
    buf = numpy.zeros((tok.vocab_size + 31) // 32, dtype=numpy.uint32)  # the mask, reused
    ptr, nbytes = buf.ctypes.data, buf.nbytes
    walked = rejected = incomplete = 0
    rejected_cases = []
    for name, schema, texts in cases:
        t0 = time.thread_time_ns()
        try:
            # Keys sorted, as deltaserve-bench-grammar reads the schema (nlohmann::json): both
            # engines then take object properties in the same (sorted) order.
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.loads(json.dumps(schema, sort_keys=True)))
            m = llguidance.LLMatcher(tok, grammar)
            err = m.get_error() if m.is_error() else ""
        except Exception as e:  # noqa: BLE001 - a refusal, whatever its form
            m, err = None, str(e) or type(e).__name__
        compile_us.append((time.thread_time_ns() - t0) / 1000)
        support[name] = not err
        if err:
            errors[name] = err.splitlines()[0][:160]
        if err:
            continue
        for text in texts:
            ids = tok.tokenize_str(text)
            for rep, into in ((0, cold), (1, warm)):
                m.reset()
                ok, at = True, -1
                for k, t in enumerate(ids):
                    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                    m.unsafe_compute_mask_ptr(ptr, nbytes)  # what vLLM/SGLang call
                    w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                    into.append((c1 - c0) / 1000)
                    (cold_wall if rep == 0 else warm_wall).append((w1 - w0) / 1000)
                    if not (int(buf[t >> 5]) >> (t & 31)) & 1 or not m.consume_token(t):
                        ok, at = False, k
                        break
                if rep == 0:
                    walked += 1
                    rejected += not ok
                    if not ok and len(rejected_cases) < 20:
                        rejected_cases.append({
                            "schema": name, "text": text[:300],
                            "before": tok.decode_str(ids[:at])[-60:],
                            "token": tok.decode_str(ids[at:at + 1])})
                    incomplete += ok and not m.is_accepting()
    # What one call through the binding costs (the floor under each mask time above).
    probe = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema({}))
    t0 = time.perf_counter_ns()
    for _ in range(10000):
        probe.is_accepting()
    call_us = (time.perf_counter_ns() - t0) / 10000 / 1000
    return {"compile_us": summary(compile_us), "cold_us": summary(cold),
            "warm_us": summary(warm), "cold_wall_us": summary(cold_wall),
            "warm_wall_us": summary(warm_wall), "binding_call_us": round(call_us, 3),
            "instances": walked, "rejected": rejected,
            "incomplete": incomplete, "rejected_cases": rejected_cases,
            "errors": errors}, support


def deltaserve_support(cli, cases):
    import tempfile
    out = {}
    for name, schema, _ in cases:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(schema, f)
        r = subprocess.run([cli, "compile", "--schema", f.name], capture_output=True, text=True)
        os.unlink(f.name)
        line = r.stdout.strip()
        out[name] = not (line.startswith('{"error"') and "\n" not in line)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="GGUF with a gpt2-style (byte-level BPE) vocab")
    ap.add_argument("--corpus", default=os.path.join(REPO, "tests", "data", "json_schema_corpus"))
    ap.add_argument("--sample", type=float, default=0.35)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--instances", type=int, default=3, help="instances per schema")
    ap.add_argument("--cli", default="", help="deltaserve-grammar, for the support comparison")
    ap.add_argument("--deltaserve-bench", default="", help="deltaserve-bench-grammar binary")
    ap.add_argument("--golden-tokens", default="",
                    help="llama.cpp tokenizations of this vocabulary, to check the tokenizer.json")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench", "grammar"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok_json, n_vocab, ends = hf_tokenizer_json(args.model)
    tok = llguidance.LLTokenizer(tok_json, n_vocab=n_vocab, eos_token=ends[0])
    report = {"model": os.path.basename(args.model), "n_vocab": n_vocab}
    if args.golden_tokens:
        bad, total = check_tokenizer(tok, args.golden_tokens)
        report["tokenizer_mismatches"] = f"{bad}/{total}"

    # The cases: sampled schemas with generated, valid instances (compact, sorted keys).
    cases = []
    for part, ident, schema in corpus.load_corpus(args.corpus, args.sample, args.seed):
        found, _ = corpus.generate(schema, args.instances, 4.0)
        try:
            strict = corpus.validator_for(schema, formats=True)
            texts = [json.dumps(x, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
                     for x in found if corpus.is_valid(strict, x) is True]
        except Exception:  # noqa: BLE001
            texts = []
        cases.append((f"{part}/{ident}", schema, texts))
    instances_path = os.path.join(args.out, "corpus_with_instances.jsonl")
    with open(instances_path, "w", encoding="utf-8") as f:
        for name, schema, texts in cases:
            f.write(json.dumps({"id": name, "schema": schema,
                                "instances": [json.loads(t) for t in texts]},
                               ensure_ascii=False) + "\n")

    report["llguidance"], llg_support = run_llguidance(tok, cases)
    report["llguidance"]["version"] = getattr(llguidance, "__version__", "1.9.1")
    report["llguidance"]["compiled"] = sum(llg_support.values())
    if args.deltaserve_bench:
        r = subprocess.run([args.deltaserve_bench, "--model", args.model, "--corpus",
                            instances_path, "--json", "--cpu-clock"], capture_output=True,
                           text=True)
        try:
            report["deltaserve"] = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report["deltaserve"] = {"error": (r.stderr or r.stdout)[-500:]}
    if args.cli:
        ds_support = deltaserve_support(args.cli, cases)
        both = sum(ds_support[n] and llg_support[n] for n, _, _ in cases)
        report["support"] = {
            "schemas": len(cases), "deltaserve": sum(ds_support.values()),
            "llguidance": sum(llg_support.values()), "both": both,
            "deltaserve_only": sum(ds_support[n] and not llg_support[n] for n, _, _ in cases),
            "llguidance_only": sum(llg_support[n] and not ds_support[n] for n, _, _ in cases),
            "neither": sum(not ds_support[n] and not llg_support[n] for n, _, _ in cases),
            "deltaserve_only_schemas": [n for n, _, _ in cases if ds_support[n] and
                                        not llg_support[n]],
            "llguidance_only_schemas": [n for n, _, _ in cases if llg_support[n] and
                                        not ds_support[n]]}
    with open(os.path.join(args.out, "grammar_compare.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
