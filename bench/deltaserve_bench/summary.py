"""DIR/summary.md: the run's Markdown tables, made from run.json's aggregates."""

from __future__ import annotations

from typing import Any

from .stats import fmt, md_table


def _errors(row: dict) -> str:
    kinds = row.get("errors_by_kind") or {}
    return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "0"


def _header(doc: dict) -> str:
    m = doc["machine"]
    load = m.get("loadavg")
    load_end = m.get("loadavg_end")
    load_txt = (f"load average {load[0]:.2f} at the start, {load_end[0]:.2f} at the end"
                if load and load_end else "load average unknown")
    return (f"# deltaserve-bench {doc['workload']}: {doc['label']}\n\n"
            f"- endpoint(s): {', '.join(doc['urls'])}, model `{doc['model']}`, "
            f"{doc['api']} API\n"
            f"- started {doc['started']}, {doc['duration_s']:.1f} s, {doc['requests']} requests, "
            f"{doc['errors']} not answered\n"
            f"- client machine: {m.get('cpu') or 'unknown CPU'}, {m.get('cores')} cores, "
            f"{load_txt}\n"
            f"- command: `{doc['command']}`\n\n" if doc.get("command") else
            f"# deltaserve-bench {doc['workload']}: {doc['label']}\n\n")


def context_sweep(doc: dict) -> str:
    agg = doc["aggregates"]
    rows = [[fmt(r["target_tokens"]), fmt(r["prompt_tokens_max"]), fmt(r["ttft_s_p50"], "ms"),
             fmt(r["prefill_tok_s_p50"]), fmt(r["decode_tok_s_p50"]),
             fmt(r["completion_tokens"]), f"{r['ok']}/{r['requests']}", _errors(r)]
            for r in agg["rows"]]
    out = md_table(["target tokens", "prompt tokens", "TTFT ms", "prefill tok/s",
                    "decode tok/s", "generated", "answered", "errors"], rows)
    stop = agg.get("stopped")
    out += (f"\nContext ceiling: the longest prompt answered was "
            f"**{fmt(agg['ceiling_prompt_tokens'])} tokens** (with max_tokens "
            f"{agg['max_tokens']}).")
    if stop:
        out += (f" Stopped at {fmt(stop['target_tokens'])} target tokens: "
                f"{stop['error_kind']} ({stop['error']}).")
    else:
        out += " No refusal up to the last length asked."
    return out + "\n"


def _latency_rows(rows: list[dict], first: list[str]) -> list[list[str]]:
    return [[*(fmt(r[k]) for k in first), f"{r['ok']}/{r['requests']}", _errors(r),
             fmt(r.get("output_tok_s")), fmt(r.get("requests_s")),
             fmt(r["ttft_s_p50"], "ms"), fmt(r["ttft_s_p90"], "ms"), fmt(r["ttft_s_p99"], "ms"),
             fmt(r["itl_s_p50"], "ms"), fmt(r["itl_s_p90"], "ms"), fmt(r["itl_s_p99"], "ms")]
            for r in rows]


LATENCY_HEADER = ["answered", "errors", "output tok/s", "req/s", "TTFT p50 ms", "p90", "p99",
                  "ITL p50 ms", "p90", "p99"]


def concurrency_sweep(doc: dict) -> str:
    agg = doc["aggregates"]
    out = (f"Prompts of ~{agg['prompt_tokens']} tokens ({agg['shared_prefix']:.0%} shared "
           f"prefix), {agg['max_tokens']} tokens out.\n\n")
    return out + md_table(["streams", *LATENCY_HEADER],
                          _latency_rows(agg["rows"], ["concurrency"]))


def structured(doc: dict) -> str:
    agg = doc["aggregates"]
    rows = _latency_rows(agg["rows"], ["concurrency", "response_format"])
    for row, r in zip(rows, agg["rows"]):
        row.insert(2, f"{r['json_valid']}/{r['ok']}")
    header = ["streams", "response_format", "valid JSON", *LATENCY_HEADER]
    return md_table(header, rows)


def multi_turn(doc: dict) -> str:
    agg = doc["aggregates"]
    rows = [[fmt(r["turn"]), fmt(r["prompt_tokens_mean"]), fmt(r["cached_tokens_mean"]),
             fmt(r["cached_fraction"]), fmt(r["ttft_s_p50"], "ms"), fmt(r["ttft_s_p90"], "ms"),
             fmt(r["itl_s_p50"], "ms"), fmt(r["decode_tok_s_p50"]), fmt(r["tool_turns"]),
             fmt(r["resumed"]), f"{r['ok']}/{r['requests']}", _errors(r)] for r in agg["rows"]]
    out = (f"{agg['sessions']} sessions × {agg['turns']} turns, system prompt ~"
           f"{agg['system_tokens']} tokens, {agg['max_tokens']} tokens out per turn.")
    if not agg["cached_reported"]:
        out += " The server reports no cached tokens."
    out += "\n\n" + md_table(["turn", "prompt tokens", "cached tokens", "cached fraction",
                              "TTFT p50 ms", "p90", "ITL p50 ms", "decode tok/s", "tool turns",
                              "resumed", "answered", "errors"], rows)
    groups = [[name, fmt(g["prompt_tokens_mean"]), fmt(g["cached_fraction"]),
               fmt(g["ttft_s_p50"], "ms"), fmt(g["ttft_s_p90"], "ms"),
               f"{g['ok']}/{g['requests']}"] for name, g in agg["groups"].items()]
    out += "\n" + md_table(["turns", "prompt tokens", "cached fraction", "TTFT p50 ms", "p90",
                            "answered"], groups)
    return out


def soak(doc: dict) -> str:
    agg = doc["aggregates"]
    o = agg["overall"]
    out = (f"{agg['duration_s'] / 60:.1f} minutes, {o['requests']} requests, {o['ok']} answered, "
           f"**{agg['lost']} lost** ({agg['lost_in_flight']} in flight at a fault, "
           f"{agg['lost_not_in_flight']} not); lost by kind: {_errors({'errors_by_kind': agg['lost_by_kind']})}."
           f" TTFT p50 {fmt(o['ttft_s_p50'], 'ms')} ms, p99 {fmt(o['ttft_s_p99'], 'ms')} ms; "
           f"{fmt(o['output_tok_s'])} output tok/s.\n\n")
    rows = []
    for w in agg["fault_windows"]:
        for name in ("before", "during", "after"):
            r = w["windows"][name]
            rows.append([f"{w['fault']}: `{w['command']}` at {w['at_s']:.0f} s"
                         if name == "before" else "", name,
                         f"{r['from_s']:.0f}–{r['to_s']:.0f}", f"{r['ok']}/{r['requests']}",
                         _errors(r), fmt(r["ttft_s_p50"], "ms"), fmt(r["ttft_s_p99"], "ms"),
                         fmt(r["e2e_s_p50"], "ms"), fmt(r["e2e_s_p99"], "ms")])
    if rows:
        out += md_table(["fault", "window", "seconds", "answered", "lost", "TTFT p50 ms", "p99",
                         "e2e p50 ms", "p99"], rows)
    for f in agg["faults"]:
        out += (f"\n- fault {f['index']}: `{f['command']}` exit {f.get('exit_status')}"
                + (f", output: `{f['output'].strip()[-200:]}`" if f.get("output", "").strip()
                   else ""))
    return out + "\n"


WRITERS = {"context-sweep": context_sweep, "concurrency-sweep": concurrency_sweep,
           "structured": structured, "multi-turn": multi_turn, "soak": soak}


def write(doc: dict[str, Any], path) -> str:
    text = _header(doc) + WRITERS[doc["workload"]](doc)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text
