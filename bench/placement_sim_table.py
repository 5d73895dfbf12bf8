#!/usr/bin/env python3
"""Markdown table and plot of deltaserve-placement-sim results (bench/placement_sim_bench.sh).

    placement_sim_table.py DIR      reads DIR/<model>_<profile>_<trace>_<fraction>.json, prints
                                    the tables of docs/benchmarks.md (the policies; uniform
                                    routing at every budget; the what-if of equal expert
                                    sizes, <model>-even) and, when matplotlib is importable,
                                    writes DIR/placement_sim.png
"""
import glob
import json
import os
import sys

TRACE_ORDER = ["uniform", "zipf0.5", "zipf1.0", "zipf1.0-drift", "recorded"]


def load(directory):
    runs = {}
    for path in glob.glob(os.path.join(directory, "*.json")):
        model, profile, trace, fraction = os.path.basename(path)[:-5].split("_")
        with open(path) as f:
            try:
                runs[(model, profile, trace, float(fraction))] = json.load(f)
            except json.JSONDecodeError:
                print(f"(skipped {path}: not a complete result)", file=sys.stderr)
    return runs


def table(runs):
    print("| model | machine | trace | expert VRAM | all_cpu | n_cpu_moe (N) | static | dynamic "
          "| dynamic / n_cpu_moe | hit share static / dynamic | whole layers | "
          "fixed split / n_cpu_moe |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    keys = sorted((k for k in runs if k[3] in (0.25, 0.5) and not k[0].endswith("-even")),
                  key=lambda k: (k[0], k[1], TRACE_ORDER.index(k[2]) if k[2] in TRACE_ORDER
                                 else 99, k[3]))
    for model, profile, trace, fraction in keys:
        r = runs[(model, profile, trace, fraction)]
        p = r["policies"]
        print(f"| {model} | {profile} | {trace} | {fraction:.0%} "
              f"({r['expert_vram'] / 2**30:.1f} GiB) | {r['all_cpu']:.1f} | "
              f"{r['n_cpu_moe']:.1f} ({p['n_cpu_moe']['n']}) | {r['static']:.1f} | "
              f"{r['dynamic']:.1f} | **{r['dynamic_vs_n_cpu_moe']:.2f}** | "
              f"{p['static']['device_hit_share']:.2f} / {p['dynamic']['device_hit_share']:.2f} | "
              f"{p['dynamic']['whole_layers']} | "
              f"{p['dynamic_fixed_split']['tok_s'] / r['n_cpu_moe']:.2f} |")


def uniform_table(runs):
    """Uniform routing at every budget run: dynamic / n_cpu_moe (4 decimals), with the sizes'
    split fixed at start-up beside it, per model and machine."""
    cases = sorted({(k[0], k[1]) for k in runs if k[2] == "uniform" and not k[0].endswith("-even")})
    fractions = sorted({k[3] for k in runs if k[2] == "uniform" and not k[0].endswith("-even")})
    if not cases:
        return
    print()
    print("| model | machine | " + " | ".join(f"{f:.0%}" for f in fractions) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in fractions) + " |")
    for model, profile in cases:
        cells = []
        for f in fractions:
            r = runs.get((model, profile, "uniform", f))
            if r is None:
                cells.append("-")
                continue
            fixed = r["policies"]["dynamic_fixed_split"]["tok_s"] / r["n_cpu_moe"]
            cells.append(f"{r['dynamic_vs_n_cpu_moe']:.4f} ({fixed:.4f})")
        print(f"| {model} | {profile} | " + " | ".join(cells) + " |")


def what_if_table(runs):
    """dynamic / n_cpu_moe with the real (mixed) expert sizes and with equal ones (<model>-even):
    what one expert size (every expert at the mean size) would change."""
    keys = sorted((k for k in runs if k[0].endswith("-even")),
                  key=lambda k: (k[0], k[1], TRACE_ORDER.index(k[2]) if k[2] in TRACE_ORDER
                                 else 99, k[3]))
    if not keys:
        return
    print()
    print("| model | machine | trace | expert VRAM | slots (mixed / even) | "
          "dynamic / n_cpu_moe, mixed sizes | dynamic / n_cpu_moe, equal sizes |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for even_model, profile, trace, fraction in keys:
        model = even_model[:-len("-even")]
        even = runs[(even_model, profile, trace, fraction)]
        mixed = runs.get((model, profile, trace, fraction))
        mixed_slots = mixed["slots"] if mixed else "-"
        mixed_ratio = f"{mixed['dynamic_vs_n_cpu_moe']:.2f}" if mixed else "-"
        print(f"| {model} | {profile} | {trace} | {fraction:.0%} | {mixed_slots} / "
              f"{even['slots']} | {mixed_ratio} | {even['dynamic_vs_n_cpu_moe']:.2f} |")


def plot(runs, directory):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not available: no plot)", file=sys.stderr)
        return
    panels = sorted({(k[0], k[1]) for k in runs if not k[0].endswith("-even")
                     and len([1 for j in runs if j[:2] == k[:2] and j[2] == k[2]]) > 3})
    traces = [t for t in ["uniform", "zipf0.5", "zipf1.0-drift"]
              if any(k[2] == t for k in runs)]
    if not panels or not traces:
        print("(too few budgets per case for a plot)", file=sys.stderr)
        return
    fig, axes = plt.subplots(len(panels), len(traces), figsize=(4.2 * len(traces),
                                                                 3.4 * len(panels)),
                             squeeze=False)
    for row, (model, profile) in enumerate(panels):
        for col, trace in enumerate(traces):
            ax = axes[row][col]
            pts = sorted((k[3], runs[k]) for k in runs if k[:3] == (model, profile, trace))
            if not pts:
                continue
            gib = [r["expert_vram"] / 2**30 for _, r in pts]
            for policy, style in [("all_cpu", ":"), ("n_cpu_moe", "-s"), ("static", "--^"),
                                  ("dynamic", "-o")]:
                ax.plot(gib, [r[policy] for _, r in pts], style, label=policy, markersize=3)
            ax.plot(gib, [r["policies"]["dynamic_per_expert"]["tok_s"] for _, r in pts], "-.",
                    color="grey", linewidth=1, label="hottest experts first (no cost model)")
            ax.plot(gib, [r["policies"]["dynamic_fixed_split"]["tok_s"] for _, r in pts], ":",
                    color="black", linewidth=1, label="dynamic, sizes' split fixed")
            # The what-if of equal expert sizes, as its dynamic / n_cpu_moe ratio times this
            # panel's n_cpu_moe (equal sizes shift n_cpu_moe itself by a few per cent).
            even = [(runs[k], runs[(model, profile, trace, k[3])]) for k in sorted(runs)
                    if k[:3] == (model + "-even", profile, trace)
                    and (model, profile, trace, k[3]) in runs]
            if even:
                ax.plot([r["expert_vram"] / 2**30 for r, _ in even],
                        [r["dynamic_vs_n_cpu_moe"] * m["n_cpu_moe"] for r, m in even],
                        "x", color="black", markersize=6,
                        label="dynamic, what-if: one expert size")
            ax.set_title(f"{model}, {profile}, {trace}", fontsize=9)
            ax.set_xlabel("expert VRAM (GiB)")
            ax.set_ylabel("modelled decode tok/s")
            ax.grid(alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(directory, "placement_sim.png")
    fig.savefig(path, dpi=110)
    print(f"(plot: {path})", file=sys.stderr)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = load(sys.argv[1])
    if not runs:
        print(f"no results in {sys.argv[1]}", file=sys.stderr)
        return 1
    table(runs)
    uniform_table(runs)
    what_if_table(runs)
    plot(runs, sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
