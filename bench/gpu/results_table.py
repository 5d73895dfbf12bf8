#!/usr/bin/env python3
"""Markdown table of bench/gpu/run.sh's results (results.jsonl) for docs/benchmarks.md.

    results_table.py results.jsonl "NVIDIA H100 80GB HBM3" > results.md

Input lines: deltaserve-bench-gpu's JSON objects with a "label" ("9b q4_k_m decode@4096",
"... prefill8192", "... batched16", "bandwidth") and llama-bench's -o jsonl objects labelled
"<model> llama.cpp" (fields n_prompt, n_gen, n_depth, avg_ts). Columns: DeltaServe tok/s,
llama.cpp tok/s, their ratio, and for decode rows the fraction of the bandwidth roofline:
weight bytes one token reads x tok/s / the measured copy bandwidth (issue 16's definition).
Only the standard library.
"""
import json
import sys


def main() -> int:
    path, gpu = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "GPU"
    ours, llama, bandwidth, context = {}, {}, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            label = r.get("label", "")
            if label == "bandwidth":
                bandwidth = r.get("gb_s")
            elif label == "context":
                context = r
            elif label.endswith(" llama.cpp"):
                model = label[: -len(" llama.cpp")]
                if r.get("n_gen", 0) > 0:
                    row = f"decode@{r.get('n_depth', 0)}"
                else:
                    row = f"prefill{r.get('n_prompt', 0)}"
                llama[(model, row)] = r.get("avg_ts")
            else:
                model, _, row = label.rpartition(" ")
                ours[(model, row)] = r
    print(f"GPU: {gpu}; device-to-device copy bandwidth "
          f"{bandwidth if bandwidth is not None else '?'} GB/s (read + write)")
    if context is not None:
        print(f"CUDA context measured: {context['context_bytes'] / 2**20:.0f} MiB (the plan "
              f"reserves 512 MiB; worker used {context['used_bytes'] / 2**20:.0f} MiB, planned "
              f"{context['planned_bytes'] / 2**20:.0f} MiB)")
    print()
    print("| model | scenario | DeltaServe tok/s | llama.cpp tok/s | ratio | % of roofline |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (model, row), r in ours.items():
        if r.get("failed"):
            print(f"| {model} | {row} | failed | | | |")
            continue
        tok_s = r["tok_s"]
        theirs = llama.get((model, row))
        ratio = f"{tok_s / theirs:.2f}x" if theirs else ""
        roof = ""
        if row.startswith("decode") and bandwidth:
            achieved = r["weight_bytes_per_token"] * tok_s / 1e9
            roof = f"{100.0 * achieved / bandwidth:.0f}%"
        print(f"| {model} | {row} | {tok_s:.1f} | "
              f"{f'{theirs:.1f}' if theirs else ''} | {ratio} | {roof} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
