#!/usr/bin/env python3
"""The end of a tests/run_all.sh run: the table of its phases' wall times, the slowest tests of
each ctest pass, and - when something failed - each failing test's name with the last lines of
its output, so that a failed CI log can be read from its bottom.

Inputs: the phase log run_all.sh writes (one tab-separated line per phase: name, seconds,
status, where status is "ok", "FAILED" or "skipped: <why>") and the JUnit files ctest wrote
(`ctest --output-junit`), each given as LABEL=PATH. Exit status 0; run_all.sh decides its own.
Standard library only (it runs before and without any venv).
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"


def read_phases(path: str):
    phases = []
    if not os.path.exists(path):
        return phases
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                phases.append((parts[0], float(parts[1]), parts[2]))
    return phases


def read_junit(path: str):
    """Returns [(name, seconds, status, output)] of one ctest JUnit file, [] if unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"ci_report: cannot read {path}: {e}", file=sys.stderr)
        return []
    cases = []
    for case in root.iter("testcase"):
        out = case.findtext("system-out") or ""
        failure = case.find("failure")
        if failure is not None and failure.get("message"):
            out += "\n" + failure.get("message")
        cases.append((case.get("name", "?"), float(case.get("time", "0") or 0),
                      case.get("status", "?"), out))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", required=True, help="run_all.sh's phase log")
    ap.add_argument("--tail", type=int, default=25, help="output lines shown per failing test")
    ap.add_argument("--slowest", type=int, default=8, help="slowest tests listed per ctest pass")
    ap.add_argument("junit", nargs="*", help="LABEL=PATH of a ctest --output-junit file")
    args = ap.parse_args()

    phases = read_phases(args.phases)
    print("\n=== phases (wall time) ===\n")
    print("| phase | wall (m:ss) | result |")
    print("|---|---:|---|")
    for name, secs, status in phases:
        print(f"| {name} | {fmt_seconds(secs)} | {status} |")
    print(f"| **total** | **{fmt_seconds(sum(p[1] for p in phases))}** | |")

    failing = []
    for spec in args.junit:
        label, _, path = spec.partition("=")
        if not os.path.exists(path):
            continue
        cases = read_junit(path)
        slow = sorted(cases, key=lambda c: -c[1])[: args.slowest]
        if slow:
            print(f"\nslowest tests of '{label}': " +
                  ", ".join(f"{n} {t:.0f}s" for n, t, _, _ in slow))
        failing += [(label, c) for c in cases if c[2] == "fail"]

    if failing:
        print(f"\n=== {len(failing)} failing test(s) ===")
        for label, (name, secs, _, out) in failing:
            lines = out.rstrip("\n").splitlines()[-args.tail:]
            print(f"\n--- [{label}] {name} ({secs:.1f} s), last {len(lines)} lines:")
            for line in lines:
                print("    " + line)
        print("\nfailing: " + " ".join(f"[{label}] {c[0]}" for label, c in failing))
    failed_phases = [p[0] for p in phases if p[2] == "FAILED"]
    if failed_phases:
        print("failed phases: " + ", ".join(failed_phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
