"""The table behind docs/benchmarks.md's comparison of two builds on a resumed chat turn.

Reads OUT/ttft-ab-rN-{a,b}/results.jsonl and worker.log (written by `docs_runs.sh ttft-ab`) and
prints, per build, the worker's prefill time of the resumed turns (`prefill_ms` of its request
log, restore included) grouped by how many new tokens the turn had (a turn whose previous reply
re-rendered to other tokens has ~20 more), as the median and range over all rounds, and how many
turns met the bound we hold a resumed turn to at the client: TTFT <= 1.15 x new tokens / the
cold prefill rate of that conversation's first turn + 100 ms.

  python3 bench/deltaserve_bench/ttft_ab_table.py build/bench/dsbench 4
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from ttft_table import load, resumed_bound, resumed_requests


def resumed_prefill(log: Path) -> list[tuple[int, float]]:
    """(new tokens, prefill_ms) of every request the worker resumed from a snapshot."""
    out = []
    for fields in resumed_requests(log):
        try:
            out.append((int(fields["prompt"]) - int(fields["cached"]), float(fields["prefill_ms"])))
        except (KeyError, ValueError):
            continue
    return out


def bound_ratios(run: Path) -> list[float]:
    """Each resumed turn's client TTFT over its bound."""
    recs = load(run)
    cold = [r for r in recs if r["turn"] == 0]
    if not cold:
        return []
    ratios = []
    for r in recs:
        if r["turn"] == 0 or r.get("cached_tokens") is None:
            continue
        bound = resumed_bound(r["prompt_tokens"] - r["cached_tokens"], cold[0]["prompt_tokens"],
                              cold[0]["ttft_s"])
        ratios.append(r["ttft_s"] / bound)
    return ratios


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rounds = Path(sys.argv[1]), int(sys.argv[2])
    rows = {}
    for side in ("a", "b"):
        turns, ratios = [], []
        for r in range(1, rounds + 1):
            run = out / f"ttft-ab-r{r}-{side}"
            turns += resumed_prefill(run / "worker.log")
            ratios += bound_ratios(run)
        rows[side] = (turns, ratios)
    # Two groups of new-token counts: split halfway between the smallest and the largest.
    counts = [n for turns, _ in rows.values() for n, _ in turns]
    if not counts:
        print("no resumed turns found", file=sys.stderr)
        return 1
    cut = (min(counts) + max(counts)) / 2
    print("| build | turns | new tokens | worker prefill, median (range) |")
    print("| --- | ---: | ---: | ---: |")
    for side, (turns, _) in rows.items():
        for lo, hi in ((0, cut), (cut, float("inf"))):
            group = [(n, ms) for n, ms in turns if lo <= n < hi]
            if not group:
                continue
            ms = [m for _, m in group]
            n = statistics.median(t for t, _ in group)
            print(f"| {side} | {len(group)} | ~{n:.0f} | {statistics.median(ms):.1f} ms "
                  f"({min(ms):.1f}–{max(ms):.1f}) |")
    print()
    for side, (_, ratios) in rows.items():
        if ratios:
            within = sum(q <= 1.0 for q in ratios)
            print(f"build {side}: {within} of {len(ratios)} resumed turns within the bound, "
                  f"worst {max(ratios):.3f}x, median {statistics.median(ratios):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
