"""The table behind docs/benchmarks.md's chat TTFT rows: DeltaServe against llama-server.

Reads OUT/ttft-rN-{deltaserve,llama-server}/results.jsonl (written by `docs_runs.sh ttft`) and
prints, per round and as medians over the rounds, the cold first turn's TTFT (~3.3K prompt
tokens, nothing cached) and the median TTFT of the resumed turns (2..6, ~110 new tokens each),
with llama-server's figure beside ours and the ratio DeltaServe / llama-server, and the bound
we hold a resumed turn to (1.15 x its new tokens at the cold prefill rate, + 100 ms). When the
worker's log was saved beside a DeltaServe run, its request lines split our resumed-turn TTFT
into queue, snapshot restore, prefill of the new tokens and the router's share.

  python3 bench/deltaserve_bench/ttft_table.py build/bench/dsbench 3
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def load(run: Path) -> list[dict]:
    path = run / "results.jsonl"
    if not path.exists():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if r.get("workload") == "multi-turn" and r.get("ok")]


def cold_and_resumed(recs: list[dict]) -> tuple[float | None, float | None, dict]:
    cold = [r["ttft_s"] for r in recs if r["turn"] == 0]
    later = [r for r in recs if r["turn"] > 0]
    info = {
        "cold_prompt": recs[0]["prompt_tokens"] if recs else None,
        "new_tokens": statistics.median(
            r["prompt_tokens"] - (r.get("cached_tokens") or 0) for r in later)
        if later and all(r.get("cached_tokens") is not None for r in later) else None,
    }
    return (cold[0] if cold else None,
            statistics.median(r["ttft_s"] for r in later) if later else None, info)


def resumed_requests(log: Path) -> list[dict]:
    """The fields of the worker's request lines (docs/metrics.md, Logs) of the requests it
    resumed from a snapshot."""
    if not log.exists():
        return []
    return [dict(re.findall(r"(\w+)=(\S+)", line))
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("request ") and "cached_from=none" not in line]


def resumed_bound(new_tokens: float, cold_prompt: float, cold_s: float) -> float:
    """Our bound for a resumed turn's TTFT, seconds: 1.15 x (new tokens / the cold prefill
    rate) + 100 ms."""
    return 1.15 * new_tokens / (cold_prompt / cold_s) + 0.100


def worker_split(log: Path) -> dict | None:
    """Medians over the resumed turns of the worker's request lines."""
    rows = []
    for fields in resumed_requests(log):
        try:
            rows.append({k: float(fields[k]) for k in
                         ("queue_ms", "ttft_ms", "restore_ms", "prefill_ms", "prompt", "cached")})
        except (KeyError, ValueError):
            continue
    if not rows:
        return None
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.0f} ms"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rounds = Path(sys.argv[1]), int(sys.argv[2])
    print("| round | cold prompt | DeltaServe cold | llama-server cold | ratio | new tokens "
          "| DeltaServe resumed | bound | llama-server resumed | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    colds, resumes, splits, client_resumed = [], [], [], []
    for n in range(1, rounds + 1):
        ds_c, ds_r, info = cold_and_resumed(load(out / f"ttft-r{n}-deltaserve"))
        ll_c, ll_r, _ = cold_and_resumed(load(out / f"ttft-r{n}-llama-server"))
        bound = None
        if ds_c and info["cold_prompt"] and info["new_tokens"] is not None:
            bound = resumed_bound(info["new_tokens"], info["cold_prompt"], ds_c)
        print(f"| {n} | {info['cold_prompt']} | {ms(ds_c)} | {ms(ll_c)} | {ratio(ds_c, ll_c)} "
              f"| {info['new_tokens']} | {ms(ds_r)} | {ms(bound)} | {ms(ll_r)} "
              f"| {ratio(ds_r, ll_r)} |")
        if None not in (ds_c, ll_c):
            colds.append(ds_c / ll_c)
        if None not in (ds_r, ll_r):
            resumes.append(ds_r / ll_r)
        split = worker_split(out / f"ttft-r{n}-deltaserve" / "worker.log")
        if split is not None and ds_r is not None:
            splits.append(split)
            client_resumed.append(ds_r)
    if colds and resumes:
        print(f"\nMedian ratio over {len(colds)} rounds: cold {statistics.median(colds):.2f}× "
              f"(range {min(colds):.2f}–{max(colds):.2f}), resumed "
              f"{statistics.median(resumes):.2f}× (range {min(resumes):.2f}–{max(resumes):.2f}).")
    if splits:
        med = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
        client = statistics.median(client_resumed) * 1000
        compute = med["prefill_ms"] - med["restore_ms"]
        print("\nWhere a resumed turn's time goes (DeltaServe, medians over the rounds' medians):\n")
        print("| part | ms |")
        print("| --- | ---: |")
        print(f"| router and HTTP (client TTFT − worker TTFT) | {client - med['ttft_ms']:.1f} |")
        print(f"| worker queue | {med['queue_ms']:.1f} |")
        print(f"| snapshot lookup and restore | {med['restore_ms']:.1f} |")
        print(f"| prefill of {med['prompt'] - med['cached']:.0f} new tokens and the first token "
              f"| {compute:.1f} |")
        print(f"| client TTFT | {client:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
