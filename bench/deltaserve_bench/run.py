"""A benchmark run: its endpoints, its clock, the results file and the progress bar.

Every request of every workload goes through `Run.request`, which writes one JSON line to
DIR/results.jsonl as soon as the request ends (a run stopped half-way keeps what it measured).
`Run.finish` writes DIR/run.json: the arguments, the machine, and the workload's aggregates that
summary.md, the plots and `compare` are made from.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import textgen
from .client import Endpoint, Result


class FatalError(Exception):
    """A condition that ends the run with a message and exit status 3 (server unreachable,
    the probe refused)."""


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg": load,
            "host": platform.node(), "python": platform.python_version()}


class Run:
    def __init__(self, args, workload: str):
        self.args = args
        self.workload = workload
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.clock_zero = time.monotonic()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.machine_start = machine()
        self.rng = random.Random(args.seed)
        extra = json.loads(args.extra_body) if args.extra_body else None
        self.endpoints = [Endpoint(url, args.model, api=args.api, api_key=args.api_key,
                                   timeout_s=args.timeout, extra_body=extra,
                                   clock_zero=self.clock_zero) for url in args.url]
        self.records: list[dict] = []
        self._results = open(self.out / "results.jsonl", "w", encoding="utf-8")
        self.bar: tqdm | None = None
        self.scale = textgen.TokenScale()
        self.command = ""
        self.usage_fallback = False
        # The probe requests' usage, kept apart from the results so that a server's token
        # counters can be reconciled with results.jsonl exactly.
        self.probe_usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0,
                            "cached_tokens": 0}

    def progress(self, total: int | None, desc: str) -> tqdm:
        if self.bar is not None:
            self.bar.close()
        self.bar = tqdm(total=total, desc=desc, unit="req", file=sys.stderr, mininterval=0.5,
                        disable=self.args.no_progress, dynamic_ncols=True)
        return self.bar

    def now(self) -> float:
        return time.monotonic() - self.clock_zero

    async def request(self, messages: list[dict], endpoint: int = 0, tags: dict | None = None,
                      check=None, **kwargs) -> tuple[Result, dict]:
        """Sends one request and records it with `tags`; `check(result)` may add fields (e.g.
        whether the output validates) before the line is written."""
        ep = self.endpoints[endpoint % len(self.endpoints)]
        kwargs.setdefault("max_tokens", self.args.max_tokens)
        kwargs.setdefault("temperature", self.args.temperature)
        res = await ep.send(messages, **kwargs)
        extra = check(res) if check is not None else {}
        if res.ok and res.prompt_tokens is None and self.usage_fallback:
            # The server streams no usage: tokens counted by the client (see probe()).
            res.completion_tokens = res.chunks
            res.prompt_tokens = self.scale.estimate(messages, kwargs.get("tools"))
            extra["usage_reported"] = False
        rec = self.record(res, url=ep.base, **(tags or {}), **extra)
        return res, rec

    def record(self, res: Result, **tags) -> dict:
        # Microseconds are what the clock resolves; the rates are computed from the stored values
        # so that a reader of results.jsonl gets the same numbers from them.
        res.itl_s = [round(x, 6) for x in res.itl_s]
        rec: dict[str, Any] = {"workload": self.workload, **tags}
        rec.update({
            "ok": res.ok, "status": res.status, "error_kind": res.error_kind, "error": res.error,
            "t_start": round(res.t_start, 6), "t_end": round(res.t_end, 6),
            "ttft_s": res.ttft_s, "e2e_s": res.e2e_s,
            "itl_s": res.itl_s, "chunks": res.chunks,
            "prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
            "cached_tokens": res.cached_tokens, "finish_reason": res.finish_reason,
            "output_chars": len(res.text),
        })
        rec.update(res.metrics())
        self._results.write(json.dumps(rec) + "\n")
        self._results.flush()
        self.records.append(rec)
        if self.bar is not None:
            self.bar.update(1)
            if not res.ok:
                errors = sum(1 for r in self.records if not r["ok"])
                self.bar.set_postfix(errors=errors, refresh=False)
        return rec

    async def probe(self, calibrate: bool = True) -> None:
        """A warm-up request to every endpoint (not recorded): fails the run with a clear
        message when a server cannot be reached or refuses a plain chat request. With
        `calibrate`, two prompt sizes fit the words-to-tokens scale of the first endpoint."""
        rng = random.Random(self.args.seed ^ 0x5EED)
        for i, ep in enumerate(self.endpoints):
            sizes = (24, 120) if calibrate and i == 0 else (24,)
            points = []
            for n in sizes:
                res = await ep.send([{"role": "user", "content": textgen.words(rng, n)}],
                                    max_tokens=2, temperature=0.0)
                self.probe_usage["requests"] += 1
                for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
                    self.probe_usage[key] += getattr(res, key) or 0
                if not res.ok:
                    if res.error_kind == "connect":
                        raise FatalError(f"cannot reach {ep.base}: {res.error}")
                    raise FatalError(f"{ep.base} refused the probe request "
                                     f"(model {ep.model!r}, {ep.api} API): {res.error}")
                if res.prompt_tokens is None:
                    # No usage in the stream (llama-cpp-python's server): calibrate with
                    # non-streamed requests, then count chunks as tokens and estimate prompts.
                    whole = await ep.usage_whole(
                        [{"role": "user", "content": textgen.words(rng, n)}], 2)
                    if whole is None:
                        raise FatalError(f"{ep.base} reported no usage, streamed or not; "
                                         "deltaserve-bench needs the server's token counts")
                    if not self.usage_fallback:
                        print(f"deltaserve-bench: {ep.base} streams no usage: completion "
                              "tokens are counted as chunks and prompt tokens estimated "
                              "(usage_reported false in results.jsonl)", file=sys.stderr)
                    self.usage_fallback = True
                    res.prompt_tokens, res.completion_tokens = whole
                points.append((n, res.prompt_tokens))
            if len(points) == 2:
                self.scale = textgen.TokenScale.fit(points[0], points[1])

    def finish(self, aggregates: dict[str, Any]) -> dict[str, Any]:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._results.close()
        doc = {
            "tool": "deltaserve-bench", "format": 1, "workload": self.workload,
            "label": self.args.label or self.endpoints[0].base,
            "command": self.command,
            "urls": [ep.base for ep in self.endpoints], "model": self.args.model,
            "api": self.args.api, "started": self.started.isoformat(timespec="seconds"),
            "duration_s": round(self.now(), 3),
            "machine": {**self.machine_start, "loadavg_end": machine()["loadavg"]},
            "args": {k: v for k, v in vars(self.args).items()
                     if k not in ("api_key", "func")},
            "requests": len(self.records),
            "errors": sum(1 for r in self.records if not r["ok"]),
            "probe_usage": self.probe_usage,
            "aggregates": aggregates,
        }
        with open(self.out / "run.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        return doc

    async def close(self) -> None:
        for ep in self.endpoints:
            await ep.close()
