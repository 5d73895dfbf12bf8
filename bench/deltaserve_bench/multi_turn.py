"""The multi-turn workload: N concurrent agent sessions with long histories and tool turns.

Each session is one conversation: a long system prompt (a `--shared-prefix` fraction of it the
same for every session, as one agent team's instructions are), the tool definitions, then turns.
A turn is either a user message of `--user-tokens`, or (with probability `--tool-ratio`) a tool
turn: the model's previous reply is written back with a tool call and a tool result of
`--tool-result-tokens` follows, as an agent loop does. Every `--resume-every` turns a session
goes quiet for `--resume-gap` seconds and then resumes (with several `--url`s, on the next one:
resuming on another replica). Turns are recorded with their index, kind and whether they
resumed, so TTFT and cached tokens per turn can be told apart. `--conversations FILE` replays
recorded conversations (vLLM's multi-turn JSON) instead: their user turns in order, the
server's own replies in between.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from . import textgen
from .run import Run
from .stats import latency_row, mean


def _system_prompt(run: Run, session: int) -> str:
    a = run.args
    total = run.scale.words_for(a.system_tokens)
    shared_words = int(total * a.shared_prefix)
    shared = textgen.words(random.Random(a.seed + 7), shared_words)
    own = textgen.words(random.Random(a.seed * 1000 + session), total - shared_words)
    return ("You are a coding agent working in a repository. Follow the rules below.\n" +
            shared + ("\n" + own if own else ""))


async def _session(run: Run, session: int, script: list[dict] | None) -> None:
    a = run.args
    rng = random.Random(a.seed * 7919 + session)  # the text
    # The turn kinds and tool calls from their own generator: the text's length depends on the
    # server's tokens, and every server must see the same sequence of user and tool turns.
    shape_rng = random.Random(a.seed * 7919 + session + 1_000_003)
    endpoint = session
    if script is not None:
        history = [m for m in script[:1] if m["role"] == "system"]
        user_turns = [m["content"] for m in script if m["role"] == "user"][:a.turns]
    else:
        history = [{"role": "system", "content": _system_prompt(run, session)}]
        user_turns = None
    tools = textgen.TOOLS if script is None and a.tool_ratio > 0 else None
    last_reply = ""
    n_turns = len(user_turns) if user_turns is not None else a.turns
    for turn in range(n_turns):
        resumed = False
        if turn > 0 and a.resume_every > 0 and turn % a.resume_every == 0:
            await asyncio.sleep(a.resume_gap)
            resumed = True
            if len(run.endpoints) > 1:
                endpoint += 1
        elif turn > 0:
            await asyncio.sleep(a.think_time)
        kind = "user"
        if user_turns is not None:
            if turn > 0:
                history.append({"role": "assistant", "content": last_reply})
            history.append({"role": "user", "content": user_turns[turn]})
        elif turn > 0 and shape_rng.random() < a.tool_ratio:
            kind = "tool"
            call = textgen.tool_call(shape_rng, session, turn)
            history.append({"role": "assistant", "content": last_reply or None,
                            "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": call["id"],
                            "content": textgen.words(rng, run.scale.words_for(
                                a.tool_result_tokens))})
        else:
            if turn > 0:
                history.append({"role": "assistant", "content": last_reply})
            history.append({"role": "user", "content": textgen.words(
                rng, run.scale.words_for(a.user_tokens))})
        res, _ = await run.request(
            history, endpoint=endpoint, tools=tools,
            tags={"session": session, "turn": turn, "turn_kind": kind, "resumed": resumed,
                  "messages": len(history)})
        if not res.ok:
            return  # a refused turn (e.g. the history outgrew the context) ends the session
        last_reply = res.text


async def multi_turn(run: Run) -> dict[str, Any]:
    a = run.args
    await run.probe()
    scripts = None
    if a.conversations:
        scripts = textgen.load_conversations(a.conversations)
    n = a.sessions
    turns = a.turns
    if scripts is not None:
        total = sum(min(a.turns, sum(1 for m in scripts[s % len(scripts)] if m["role"] == "user"))
                    for s in range(n))
    else:
        total = n * turns
    run.progress(total, "multi-turn")
    await asyncio.gather(*(_session(run, s, None if scripts is None else scripts[s % len(scripts)])
                           for s in range(n)))
    rows = []
    for turn in range(turns):
        recs = [r for r in run.records if r["turn"] == turn]
        if not recs:
            continue
        rows.append({"turn": turn, **latency_row(recs),
                     "cached_fraction": _cached_fraction(recs),
                     "resumed": sum(1 for r in recs if r["resumed"]),
                     "tool_turns": sum(1 for r in recs if r["turn_kind"] == "tool")})
    groups = {}
    for name, pick in (("first turn", lambda r: r["turn"] == 0),
                       ("continued", lambda r: r["turn"] > 0 and not r["resumed"]),
                       ("resumed", lambda r: r["resumed"])):
        recs = [r for r in run.records if pick(r)]
        if recs:
            groups[name] = {**latency_row(recs), "cached_fraction": _cached_fraction(recs)}
    return {"rows": rows, "groups": groups, "sessions": n, "turns": turns,
            "system_tokens": a.system_tokens, "max_tokens": a.max_tokens,
            "cached_reported": any(r["cached_tokens"] is not None for r in run.records)}


def _cached_fraction(recs: list[dict]) -> float | None:
    return mean(r["cached_tokens"] / r["prompt_tokens"] for r in recs
                if r["ok"] and r["cached_tokens"] is not None and r["prompt_tokens"])
