"""The PNG plots of a run and of a comparison (matplotlib, Agg backend: no display needed).

Each plot function takes one or more run.json documents, so a run's own plot and the
comparison of several servers are drawn by the same code: one line per run.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

PLAIN = FuncFormatter(lambda x, _: f"{x:g}")

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def _ms(x):
    return None if x is None else x * 1000


def _line(ax, xs, ys, label, color, style="-o"):
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, color=color,
                markersize=4)


def _log2_x(ax) -> None:
    """A base-2 log axis labelled with plain numbers (1, 2, 4 ... or 512, 1024 ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(PLAIN)
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_y(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def context_sweep(docs: list[dict], out: Path, name: str = "context-sweep.png") -> list[Path]:
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 4.2))
    for i, d in enumerate(docs):
        rows = [r for r in d["aggregates"]["rows"] if r["ok"]]
        xs = [r["prompt_tokens_mean"] for r in rows]
        c = COLORS[i % len(COLORS)]
        _line(a1, xs, [_ms(r["ttft_s_p50"]) for r in rows], d["label"], c)
        _line(a2, xs, [r["prefill_tok_s_p50"] for r in rows], d["label"], c)
        _line(a3, xs, [r["decode_tok_s_p50"] for r in rows], d["label"], c)
        ceiling = d["aggregates"].get("ceiling_prompt_tokens")
        if ceiling and d["aggregates"].get("stopped"):
            for ax in (a1, a2, a3):
                ax.axvline(ceiling, color=c, linestyle=":", linewidth=1)
    for ax, title in ((a1, "TTFT (ms)"), (a2, "prefill tok/s"), (a3, "decode tok/s")):
        _log2_x(ax)
        ax.set_xlabel("prompt tokens")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    _log_y(a1)
    a1.legend(fontsize=8)
    fig.suptitle("context sweep (dotted: the longest prompt answered before a refusal)",
                 fontsize=10)
    return [_save(fig, out / name)]


def _by_concurrency(ax_tp, ax_ttft, ax_itl, docs, label_of, rows_of):
    for i, d in enumerate(docs):
        for j, (suffix, rows) in enumerate(rows_of(d)):
            c = COLORS[(i * 2 + j) % len(COLORS)] if len(docs) > 1 else COLORS[j % len(COLORS)]
            xs = [r["concurrency"] for r in rows]
            label = label_of(d, suffix)
            _line(ax_tp, xs, [r.get("output_tok_s") for r in rows], label, c)
            for q, style in ((50, "-o"), (90, "--^"), (99, ":s")):
                _line(ax_ttft, xs, [_ms(r[f"ttft_s_p{q}"]) for r in rows],
                      f"{label} p{q}", c, style)
                _line(ax_itl, xs, [_ms(r[f"itl_s_p{q}"]) for r in rows],
                      f"{label} p{q}", c, style)
    for ax, title in ((ax_tp, "output tok/s (all streams)"), (ax_ttft, "TTFT (ms)"),
                      (ax_itl, "inter-token latency (ms)")):
        _log2_x(ax)
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    _log_y(ax_ttft)
    for ax in (ax_tp, ax_ttft, ax_itl):
        ax.legend(fontsize=7)


def concurrency_sweep(docs: list[dict], out: Path,
                      name: str = "concurrency-sweep.png") -> list[Path]:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    _by_concurrency(*axes, docs, lambda d, s: d["label"],
                    lambda d: [("", d["aggregates"]["rows"])])
    fig.suptitle("concurrency sweep: throughput and latency percentiles", fontsize=10)
    return [_save(fig, out / name)]


def structured(docs: list[dict], out: Path, name: str = "structured.png") -> list[Path]:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))

    def rows_of(d):
        rows = d["aggregates"]["rows"]
        return [(m, [r for r in rows if r["response_format"] == m]) for m in ("off", "on")]

    _by_concurrency(*axes, docs, lambda d, s: f"{d['label']} format {s}", rows_of)
    fig.suptitle("structured outputs: response_format off and on", fontsize=10)
    return [_save(fig, out / name)]


def multi_turn(docs: list[dict], out: Path, name: str = "multi-turn.png",
               records: list[list[dict]] | None = None) -> list[Path]:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for i, d in enumerate(docs):
        c = COLORS[i % len(COLORS)]
        rows = d["aggregates"]["rows"]
        xs = [r["turn"] for r in rows]
        if records is not None:
            recs = [r for r in records[i] if r["ok"]]
            a1.scatter([r["turn"] + (0.15 if r["resumed"] else 0) for r in recs],
                       [_ms(r["ttft_s"]) for r in recs], s=8, alpha=0.35, color=c,
                       marker="x")
        _line(a1, xs, [_ms(r["ttft_s_p50"]) for r in rows], f"{d['label']} p50", c)
        _line(a2, xs, [r["prompt_tokens_mean"] for r in rows], f"{d['label']} prompt", c, "--")
        _line(a2, xs, [r["cached_tokens_mean"] for r in rows], f"{d['label']} cached", c)
    a1.set_title("TTFT per turn (ms; x: every request, resumed turns shifted right)")
    _log_y(a1)
    a2.set_title("prompt and cached tokens per turn (mean)")
    for ax in (a1, a2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("turn")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return [_save(fig, out / name)]


def soak(docs: list[dict], out: Path, name: str = "soak.png",
         records: list[list[dict]] | None = None) -> list[Path]:
    fig, ax = plt.subplots(figsize=(12, 4.4))
    for i, d in enumerate(docs):
        c = COLORS[i % len(COLORS)]
        t0 = d["aggregates"]["t0"]
        if records is not None:
            recs = records[i]
            ok = [r for r in recs if r["ok"]]
            bad = [r for r in recs if not r["ok"]]
            ax.scatter([r["t_start"] - t0 for r in ok], [_ms(r["ttft_s"]) for r in ok], s=6,
                       alpha=0.4, color=c, label=f"{d['label']} TTFT")
            if bad:
                ax.scatter([r["t_start"] - t0 for r in bad], [1.0] * len(bad), marker="x",
                           color="black", label=f"{d['label']} lost ({len(bad)})")
        for k, f in enumerate(d["aggregates"]["fault_windows"]):
            ax.axvline(f["at_s"], color=c, linestyle="--", linewidth=1)
            # The command's last words (the fault itself, not the path of the script), staggered.
            words = [w for w in f["command"].split() if "/" not in w] or [f["command"]]
            label = " ".join(words[-3:])
            ax.text(f["at_s"], 1.01 + 0.05 * (k % 2), f"{f['fault']}: {label[:32]}",
                    transform=ax.get_xaxis_transform(), fontsize=7)
    _log_y(ax)
    ax.set_xlabel("seconds")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("soak: TTFT of every request, faults dashed, lost requests x", pad=26)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, out / name)]


PLOTTERS = {"context-sweep": context_sweep, "concurrency-sweep": concurrency_sweep,
            "structured": structured, "multi-turn": multi_turn, "soak": soak}
WITH_RECORDS = ("multi-turn", "soak")


def draw(docs: list[dict], out: Path, records: list[list[dict]] | None = None,
         name: str | None = None) -> list[Path]:
    workload = docs[0]["workload"]
    kwargs = {}
    if name:
        kwargs["name"] = name
    if workload in WITH_RECORDS:
        kwargs["records"] = records
    return PLOTTERS[workload](docs, out, **kwargs)
