"""Percentiles and the per-group aggregates every summary, plot and comparison is made of."""

from __future__ import annotations

import collections
from typing import Any, Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]; None when empty."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Iterable[float]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def errors_by_kind(records: list[dict]) -> dict[str, int]:
    return dict(collections.Counter(r["error_kind"] for r in records if not r["ok"]))


def latency_row(records: list[dict], wall_s: float | None = None) -> dict[str, Any]:
    """Requests, errors, TTFT / ITL / end-to-end percentiles and throughput of a group."""
    ok = [r for r in records if r["ok"]]
    itl = [x for r in ok for x in r["itl_s"]]
    row: dict[str, Any] = {
        "requests": len(records), "ok": len(ok), "errors": len(records) - len(ok),
        "errors_by_kind": errors_by_kind(records),
        "prompt_tokens_mean": mean(r["prompt_tokens"] for r in ok),
        "completion_tokens": sum(r["completion_tokens"] or 0 for r in ok),
        "cached_tokens_mean": mean(r["cached_tokens"] for r in ok),
        "decode_tok_s_p50": percentile((r["decode_tok_s"] for r in ok), 50),
    }
    for name, xs in (("ttft_s", [r["ttft_s"] for r in ok]), ("itl_s", itl),
                     ("e2e_s", [r["e2e_s"] for r in ok])):
        for q in (50, 90, 99):
            row[f"{name}_p{q}"] = percentile(xs, q)
    if wall_s:
        row["wall_s"] = wall_s
        row["output_tok_s"] = row["completion_tokens"] / wall_s
        row["requests_s"] = len(ok) / wall_s
    return row


def fmt(value: Any, unit: str = "") -> str:
    """A table cell: ms for seconds below 10, 3 significant digits, '–' for missing."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if unit == "ms":
        return f"{value * 1000:.1f}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
