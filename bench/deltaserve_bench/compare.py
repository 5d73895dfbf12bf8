"""`compare RUN... --out DIR`: several runs of one workload (e.g. on different servers) in one
table with ratios to the first run, and one plot with a line per run.

A RUN is a run.json file or the directory that holds it; its results.jsonl beside it is read
when a plot shows every request (multi-turn, soak).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from . import plots
from .stats import fmt, md_table


class CompareError(Exception):
    pass


def load(path: str) -> tuple[dict, list[dict] | None]:
    p = Path(path)
    if p.is_dir():
        p = p / "run.json"
    if not p.is_file():
        raise CompareError(f"{path}: no run.json there (give a run's directory or its run.json)")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CompareError(f"{p}: not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("tool") != "deltaserve-bench":
        raise CompareError(f"{p}: not a deltaserve-bench run.json")
    results = p.parent / "results.jsonl"
    records = None
    if results.is_file():
        records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()
                   if line.strip()]
    return doc, records


def _ratio(x, base) -> str:
    if x is None or not base:
        return "–"
    return f"{x / base:.2f}×"


def _table(docs: list[dict], key_name: str, keys: list, get_row: Callable[[dict, Any], dict | None],
           metrics: list[tuple[str, str, str]]) -> str:
    """One row per key; per metric a column per run and, after the first, its ratio to it."""
    header = [key_name]
    for title, _, _ in metrics:
        header.append(f"{title} {docs[0]['label']}")
        for d in docs[1:]:
            header += [f"{title} {d['label']}", "ratio"]
    rows = []
    for k in keys:
        cells = [fmt(k) if not isinstance(k, tuple) else " ".join(str(x) for x in k)]
        for _, field, unit in metrics:
            vals = []
            for d in docs:
                r = get_row(d, k)
                vals.append(r.get(field) if r else None)
            cells.append(fmt(vals[0], unit))
            for v in vals[1:]:
                cells += [fmt(v, unit), _ratio(v, vals[0])]
        rows.append(cells)
    return md_table(header, rows)


def _find(rows: list[dict], **match) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def table(docs: list[dict]) -> str:
    w = docs[0]["workload"]
    rows_of = [d["aggregates"].get("rows", []) for d in docs]
    if w == "context-sweep":
        keys = sorted({r["target_tokens"] for rows in rows_of for r in rows})
        out = _table(docs, "target tokens", keys,
                     lambda d, k: _find(d["aggregates"]["rows"], target_tokens=k),
                     [("TTFT ms", "ttft_s_p50", "ms"), ("decode tok/s", "decode_tok_s_p50", "")])
        out += "\n" + md_table(["run", "context ceiling (prompt tokens)", "stopped by"], [
            [d["label"], fmt(d["aggregates"]["ceiling_prompt_tokens"]),
             (d["aggregates"]["stopped"] or {}).get("error_kind") or "no refusal"] for d in docs])
        return out
    if w == "concurrency-sweep":
        keys = sorted({r["concurrency"] for rows in rows_of for r in rows})
        return _table(docs, "streams", keys,
                      lambda d, k: _find(d["aggregates"]["rows"], concurrency=k),
                      [("output tok/s", "output_tok_s", ""), ("TTFT p50 ms", "ttft_s_p50", "ms"),
                       ("TTFT p99 ms", "ttft_s_p99", "ms"), ("ITL p50 ms", "itl_s_p50", "ms"),
                       ("errors", "errors", "")])
    if w == "structured":
        keys = sorted({(r["concurrency"], r["response_format"]) for rows in rows_of for r in rows})
        return _table(docs, "streams, format", keys,
                      lambda d, k: _find(d["aggregates"]["rows"], concurrency=k[0],
                                         response_format=k[1]),
                      [("output tok/s", "output_tok_s", ""), ("TTFT p50 ms", "ttft_s_p50", "ms"),
                       ("valid JSON", "json_valid", "")])
    if w == "multi-turn":
        keys = sorted({r["turn"] for rows in rows_of for r in rows})
        out = _table(docs, "turn", keys, lambda d, k: _find(d["aggregates"]["rows"], turn=k),
                     [("TTFT p50 ms", "ttft_s_p50", "ms"), ("cached", "cached_fraction", "")])
        groups = sorted({g for d in docs for g in d["aggregates"]["groups"]})
        out += "\n" + _table(docs, "turns", groups,
                             lambda d, k: d["aggregates"]["groups"].get(k),
                             [("TTFT p50 ms", "ttft_s_p50", "ms"),
                              ("TTFT p90 ms", "ttft_s_p90", "ms")])
        return out
    if w == "soak":
        return _table(docs, "", ["whole run"], lambda d, k: {**d["aggregates"]["overall"],
                                                            "lost": d["aggregates"]["lost"]},
                      [("output tok/s", "output_tok_s", ""), ("TTFT p50 ms", "ttft_s_p50", "ms"),
                       ("TTFT p99 ms", "ttft_s_p99", "ms"), ("lost", "lost", "")])
    raise CompareError(f"unknown workload {w!r}")


def compare(paths: list[str], out: Path, name: str | None = None) -> tuple[str, list[Path]]:
    if len(paths) < 2:
        raise CompareError("compare needs at least two runs")
    loaded = [load(p) for p in paths]
    docs = [d for d, _ in loaded]
    kinds = {d["workload"] for d in docs}
    if len(kinds) != 1:
        raise CompareError("the runs are of different workloads: " + ", ".join(
            f"{p} is {d['workload']}" for p, d in zip(paths, docs)))
    labels = [d["label"] for d in docs]
    for i, d in enumerate(docs):  # two runs with the same label: tell them apart by position
        if labels.count(d["label"]) > 1:
            d["label"] = f"{d['label']} ({i + 1})"
    out.mkdir(parents=True, exist_ok=True)
    workload = docs[0]["workload"]
    text = (f"# deltaserve-bench compare: {workload}\n\n" +
            "".join(f"- {d['label']}: {', '.join(d['urls'])}, model `{d['model']}`, "
                    f"started {d['started']}\n" for d in docs) + "\n" + table(docs))
    (out / "compare.md").write_text(text, encoding="utf-8")
    records = [r for _, r in loaded]
    if workload in plots.WITH_RECORDS and any(r is None for r in records):
        records = None
    pngs = plots.draw(docs, out, records=records, name=name or f"compare-{workload}.png")
    return text, pngs
