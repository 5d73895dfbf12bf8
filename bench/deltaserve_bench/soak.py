"""The soak workload: steady agent-like load for `--minutes`, with fault hooks.

`--concurrency` streams each run short conversations (a shared system prompt, `--turns` user
turns) back to back until the time is up. A fault hook `--fault AT:COMMAND` runs COMMAND with
the shell AT seconds into the run (`90`, `1.5m`): kill a worker, stop Redis, restart the router.
The report counts every request that got no complete answer ("lost"), by error kind, and whether
it was in flight when a fault ran (sent before the hook started and ended after it); and gives
TTFT and end-to-end latency before, during (the `--fault-window` seconds after the hook) and
after each fault.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from . import textgen
from .params import parse_fault
from .run import Run
from .stats import errors_by_kind, latency_row


async def _run_fault(run: Run, index: int, at: float, command: str, log: list[dict]) -> None:
    await asyncio.sleep(max(0.0, at - run.now()))
    entry = {"index": index, "at_s": at, "command": command, "started_s": run.now()}
    log.append(entry)
    proc = await asyncio.create_subprocess_shell(
        command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    entry["ended_s"] = run.now()
    entry["exit_status"] = proc.returncode
    entry["output"] = out.decode("utf-8", "replace")[-2000:]
    if run.bar is not None:
        run.bar.write(f"fault {index} at {entry['started_s']:.1f} s: {command} -> exit "
                      f"{proc.returncode}")


async def soak(run: Run) -> dict[str, Any]:
    a = run.args
    faults = sorted(parse_fault(f) for f in a.fault or [])
    await run.probe()
    duration = a.minutes * 60.0
    t0 = run.now()
    deadline = t0 + duration
    faults = [(t0 + at, cmd) for at, cmd in faults]
    run.progress(None, "soak")
    system = ("You are a coding agent. " +
              textgen.words(random.Random(a.seed + 7), run.scale.words_for(a.system_tokens)))
    fault_log: list[dict] = []
    hooks = [asyncio.create_task(_run_fault(run, i, at, cmd, fault_log))
             for i, (at, cmd) in enumerate(faults)]

    async def stream(sid: int) -> None:
        rng = random.Random(a.seed * 31 + sid)
        conversation = 0
        while run.now() < deadline:
            history = [{"role": "system", "content": system}]
            for turn in range(a.turns):
                if run.now() >= deadline:
                    return
                history.append({"role": "user", "content": textgen.words(
                    rng, run.scale.words_for(a.user_tokens))})
                res, _ = await run.request(history, endpoint=sid,
                                           tags={"stream": sid, "conversation": conversation,
                                                 "turn": turn})
                if not res.ok:
                    await asyncio.sleep(a.error_backoff)
                    break
                history.append({"role": "assistant", "content": res.text})
                if a.think_time > 0:
                    await asyncio.sleep(a.think_time)
            conversation += 1

    await asyncio.gather(*(stream(s) for s in range(a.concurrency)))
    for h in hooks:  # a hook set after the end still runs, so its effect is on the record
        await h
    return summarize(run.records, fault_log, a.fault_window, t0, run.now())


def summarize(records: list[dict], fault_log: list[dict], window: float, t0: float,
              t_end: float) -> dict[str, Any]:
    lost = [r for r in records if not r["ok"]]

    def in_flight(r: dict) -> bool:
        return any(r["t_start"] <= f["started_s"] <= r["t_end"] for f in fault_log)

    windows = []
    starts = [f["started_s"] for f in fault_log]
    for i, f in enumerate(fault_log):
        s = f["started_s"]
        before_from = starts[i - 1] + window if i > 0 else t0
        after_to = starts[i + 1] if i + 1 < len(starts) else t_end
        rows = {}
        for name, lo, hi in (("before", before_from, s), ("during", s, s + window),
                             ("after", s + window, after_to)):
            recs = [r for r in records if lo <= r["t_start"] < hi]
            rows[name] = {"from_s": lo - t0, "to_s": hi - t0,
                          **latency_row(recs, wall_s=max(hi - lo, 1e-9))}
        windows.append({"fault": f["index"], "command": f["command"],
                        "at_s": f["started_s"] - t0, "exit_status": f.get("exit_status"),
                        "windows": rows})
    return {
        "duration_s": t_end - t0, "overall": latency_row(records, wall_s=t_end - t0),
        "lost": len(lost), "lost_in_flight": sum(1 for r in lost if in_flight(r)),
        "lost_not_in_flight": sum(1 for r in lost if not in_flight(r)),
        "lost_by_kind": errors_by_kind(records),
        "faults": [{k: v for k, v in f.items()} for f in fault_log],
        "fault_windows": windows, "fault_window_s": window, "t0": t0,
    }
