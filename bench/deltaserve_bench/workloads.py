"""The single-request workloads: context-sweep, concurrency-sweep and structured.

Each `async def` takes a `Run`, sends its requests through it and returns the aggregates that
run.json keeps (the rows of summary.md and the points of the plots). Prompts start with a
request-unique line, so no server can answer from a cache unless a shared prefix is asked for.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from . import textgen
from .params import parse_levels
from .run import Run
from .stats import latency_row


def _prompt(run: Run, rng: random.Random, tokens: int, shared: str = "") -> list[dict]:
    """A user message of about `tokens` server tokens: the shared text (if any), a unique line,
    then filler."""
    nonce = f"Request {rng.getrandbits(64):016x}. Summarize the notes below.\n"
    shared_tokens = int(len(shared.split()) * run.scale.per_word)
    words = run.scale.words_for(max(tokens - shared_tokens - 12, 1))
    return [{"role": "user", "content": shared + nonce + textgen.words(rng, words)}]


async def context_sweep(run: Run) -> dict[str, Any]:
    a = run.args
    await run.probe()
    rng = random.Random(a.seed)
    targets = []
    t = a.start
    while len(targets) < 40 and (a.max_context is None or t <= a.max_context):
        targets.append(t)
        t *= 2
    if a.max_context is not None and targets and targets[-1] < a.max_context:
        targets.append(a.max_context)
    run.progress(len(targets) * a.reps if a.max_context else None, "context-sweep")
    rows: list[dict] = []
    accepted: list[int] = []  # targets fully answered
    stop: dict[str, Any] | None = None

    async def measure(target: int) -> bool:
        nonlocal stop
        recs = []
        for rep in range(a.reps):
            res, rec = await run.request(_prompt(run, rng, target),
                                         tags={"target_tokens": target, "rep": rep})
            recs.append(rec)
            if not res.ok:
                stop = {"target_tokens": target, "error_kind": res.error_kind,
                        "error": res.error}
                break
        row = {"target_tokens": target, **latency_row(recs)}
        ok = [r for r in recs if r["ok"]]
        row["prefill_tok_s_p50"] = _median([r["prefill_tok_s"] for r in ok])
        row["prompt_tokens_max"] = max((r["prompt_tokens"] for r in ok), default=None)
        rows.append(row)
        return len(ok) == len(recs)

    for target in targets:
        if not await measure(target):
            break
        accepted.append(target)
    # Between the last accepted length and the first refused one, halve the gap `--bisect` times:
    # the ceiling users look for by hand.
    if stop is not None and stop["error_kind"] == "refused" and accepted and a.bisect > 0:
        lo, hi = accepted[-1], stop["target_tokens"]
        first_stop = stop
        for _ in range(a.bisect):
            mid = (lo + hi) // 2
            if mid <= lo or mid >= hi:
                break
            stop = None
            if await measure(mid):
                lo = mid
                accepted.append(mid)
            else:
                hi = mid
        stop = first_stop
    rows.sort(key=lambda r: r["target_tokens"])
    ok_recs = [r for r in run.records if r["ok"]]
    ceiling = max((r["prompt_tokens"] for r in ok_recs), default=None)
    return {"rows": rows, "ceiling_prompt_tokens": ceiling, "stopped": stop,
            "refused": sum(1 for r in run.records if r["error_kind"] == "refused"),
            "max_tokens": a.max_tokens}


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


async def _level(run: Run, rng: random.Random, concurrency: int, n: int, tags: dict,
                 shared: str, **request_kwargs) -> dict[str, Any]:
    """n requests through `concurrency` streams, each sending its next as soon as the last ends."""
    prompts = [_prompt(run, rng, run.args.prompt_tokens, shared) for _ in range(n)]
    queue = list(enumerate(prompts))
    recs: list[dict] = []

    async def stream(sid: int) -> None:
        while queue:
            i, msgs = queue.pop(0)
            _, rec = await run.request(msgs, endpoint=i, tags={**tags, "stream": sid, "index": i},
                                       **request_kwargs)
            recs.append(rec)

    t0 = run.now()
    await asyncio.gather(*(stream(s) for s in range(concurrency)))
    return latency_row(recs, wall_s=run.now() - t0)


def _shared_prefix(run: Run) -> str:
    if run.args.shared_prefix <= 0:
        return ""
    words = run.scale.words_for(int(run.args.prompt_tokens * run.args.shared_prefix))
    return textgen.words(random.Random(run.args.seed + 1), words) + "\n"


async def concurrency_sweep(run: Run) -> dict[str, Any]:
    a = run.args
    await run.probe()
    levels = parse_levels(a.concurrency)
    counts = [a.requests or max(2 * c, 4) for c in levels]
    run.progress(sum(counts), "concurrency-sweep")
    rng = random.Random(a.seed)
    shared = _shared_prefix(run)
    rows = []
    for c, n in zip(levels, counts):
        row = await _level(run, rng, c, n, {"concurrency": c}, shared)
        rows.append({"concurrency": c, **row})
    return {"rows": rows, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
            "shared_prefix": a.shared_prefix}


def json_check(res) -> dict[str, Any]:
    """Whether the answer is one JSON object with the schema's keys and types."""
    try:
        doc = json.loads(res.text)
    except ValueError:
        return {"json_valid": False, "output": res.text[:4000]}
    ok = (isinstance(doc, dict) and set(doc) == set(textgen.SCHEMA["required"])
          and isinstance(doc.get("title"), str) and isinstance(doc.get("priority"), int)
          and 1 <= doc["priority"] <= 5 and isinstance(doc.get("tags"), list)
          and isinstance(doc.get("done"), bool))
    return {"json_valid": bool(ok), "output": res.text[:4000]}


async def structured(run: Run) -> dict[str, Any]:
    a = run.args
    await run.probe()
    levels = parse_levels(a.concurrency)
    counts = [a.requests or max(2 * c, 4) for c in levels]
    run.progress(2 * sum(counts), "structured")
    shared = ("Describe the task below as a JSON object with a title, a priority from 1 to 5, "
              "up to four tags and whether it is done.\n")
    rows = []
    for c, n in zip(levels, counts):
        for mode in ("off", "on"):
            # Prompts of the same lengths in both modes, but not the same text: the second mode
            # would otherwise be answered from the first one's cached prefixes.
            rng = random.Random(a.seed * 1009 + c * 2 + (mode == "on"))
            fmt = textgen.RESPONSE_FORMAT if mode == "on" else None
            before = len(run.records)
            row = await _level(run, rng, c, n, {"concurrency": c, "response_format": mode},
                               shared, response_format=fmt, check=json_check)
            recs = run.records[before:]
            row["json_valid"] = sum(1 for r in recs if r["ok"] and r["json_valid"])
            rows.append({"concurrency": c, "response_format": mode, **row})
    return {"rows": rows, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens}
