"""Parsers of the argument forms several modules share (stream counts, fault hooks); no third-
party imports, so `deltaserve-bench --help` and argument errors work before the venv exists."""

from __future__ import annotations

import re


def parse_levels(text: str) -> list[int]:
    """"1,2,4" or "1-16" (doubling from the first to the last)."""
    if "-" in text and "," not in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        if lo < 1 or hi < lo:
            raise ValueError(f"bad range {text!r}")
        out = []
        while lo < hi:
            out.append(lo)
            lo *= 2
        return out + [hi]
    levels = [int(x) for x in text.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        raise ValueError(f"bad levels {text!r}")
    return levels


def parse_fault(text: str) -> tuple[float, str]:
    """'AT:COMMAND' -> (seconds, command); AT is seconds or minutes with an 'm' or 's' suffix."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([sm]?)\s*:(.+)", text, re.S)
    if not m or not m.group(3).strip():
        raise ValueError(f"a fault is AT:COMMAND (AT in seconds, or 2.5m), not {text!r}")
    at = float(m.group(1)) * (60 if m.group(2) == "m" else 1)
    return at, m.group(3).strip()
