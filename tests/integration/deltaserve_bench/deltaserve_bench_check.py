#!/usr/bin/env python3
"""deltaserve-bench against two real routers (each in front of its own worker on the tiny golden
model), driven by deltaserve_bench_test.cc: every workload at small sizes, `compare`, the
Anthropic API, bad arguments, an unreachable server, and a soak whose fault hook kills server
B's worker.

What is checked:
- every results.jsonl line has the documented fields, with consistent values (TTFT <= e2e, one
  ITL per chunk after the first, completion_tokens <= max_tokens and == max_tokens when the
  finish reason is length, decode rate recomputed from the ITLs);
- the token counts equal the server's: the deltas of the router's own counters
  (deltaserve_router_{prompt,completion,cached_prompt}_tokens_total on /metrics) over a run equal
  the sums over results.jsonl plus the probe requests' usage in run.json;
- the context sweep stops at the first refusal, which is recorded as error_kind "refused" (HTTP
  400) and the run still exits 0 with its ceiling below the worker's context;
- summary.md, run.json and every PNG written, the PNGs non-empty (decoded, not one flat colour);
- bad arguments, an unreachable server and an unknown model exit non-zero with a one-line
  message naming the problem, never a traceback.
Prints one PASS / FAIL line per check; exit 1 when any failed.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

FIELDS = {"workload", "url", "ok", "status", "error_kind", "error", "t_start", "t_end", "ttft_s",
          "e2e_s", "itl_s", "chunks", "prompt_tokens", "completion_tokens", "cached_tokens",
          "finish_reason", "output_chars", "decode_tok_s", "prefill_tok_s"}
COUNTERS = {"prompt_tokens": "deltaserve_router_prompt_tokens_total",
            "completion_tokens": "deltaserve_router_completion_tokens_total",
            "cached_tokens": "deltaserve_router_cached_prompt_tokens_total"}

failures: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(name)
    return ok


def counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for key, family in COUNTERS.items():
        out[key] = sum(float(m.group(1)) for m in
                       re.finditer(rf"^{family}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))
    return out


class Tool:
    def __init__(self, bench: str, out: Path):
        self.bench = bench
        self.out = out

    def run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, self.bench, *args], capture_output=True,
                              text=True, timeout=timeout)

    def workload(self, name: str, workload: str, url: str, *extra: str,
                 timeout: float = 120) -> tuple[dict | None, list[dict]]:
        out = self.out / name
        proc = self.run([workload, "--url", url, "--model", "tiny", "--out", str(out),
                         "--no-progress", "--label", name, *extra], timeout)
        if not check(f"{name}: exit 0", proc.returncode == 0,
                     f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"):
            return None, []
        doc = json.loads((out / "run.json").read_text())
        recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        check(f"{name}: summary.md", (out / "summary.md").stat().st_size > 200 and
              f"deltaserve-bench {workload}" in (out / "summary.md").read_text())
        for png in [f"{workload}.png"]:
            png_ok(f"{name}: {png}", out / png)
        check_records(name, recs, doc)
        return doc, recs


def png_ok(name: str, path: Path) -> None:
    if not check(f"{name} written", path.is_file() and path.stat().st_size > 5000,
                 f"{path} missing or small"):
        return
    import matplotlib.image as mpimg
    img = mpimg.imread(str(path))
    flat = img.reshape(-1, img.shape[-1])[:, :3]
    non_white = float((flat.min(axis=1) < 0.9).mean())
    check(f"{name} has content", img.shape[0] > 200 and img.shape[1] > 300 and
          non_white > 0.01, f"shape {img.shape}, non-white fraction {non_white:.4f}")


def check_records(name: str, recs: list[dict], doc: dict) -> None:
    max_tokens = doc["args"]["max_tokens"]
    bad = []
    for i, r in enumerate(recs):
        missing = FIELDS - set(r)
        if missing:
            bad.append(f"line {i}: missing {sorted(missing)}")
            continue
        if not r["ok"]:
            if not r["error_kind"] or not r["error"]:
                bad.append(f"line {i}: failed without error_kind / error")
            continue
        problems = []
        if not (0 < r["ttft_s"] <= r["e2e_s"]):
            problems.append("ttft not in (0, e2e]")
        if len(r["itl_s"]) != r["chunks"] - 1:
            problems.append(f"{len(r['itl_s'])} ITLs for {r['chunks']} chunks")
        if r["completion_tokens"] is None or not 1 <= r["completion_tokens"] <= max_tokens:
            problems.append(f"completion_tokens {r['completion_tokens']} (max {max_tokens})")
        elif r["finish_reason"] == "length" and r["completion_tokens"] != max_tokens:
            problems.append("finish length below max_tokens")
        if r["chunks"] > (r["completion_tokens"] or 0):
            problems.append(f"{r['chunks']} chunks > {r['completion_tokens']} tokens")
        if (r["cached_tokens"] or 0) > (r["prompt_tokens"] or 0):
            problems.append("cached > prompt")
        span = sum(r["itl_s"])
        if r["completion_tokens"] > 1 and span > 0:
            want = (r["completion_tokens"] - 1) / span
            if r["decode_tok_s"] is None or abs(r["decode_tok_s"] - want) > 1e-3 * want + 1e-6:
                problems.append(f"decode_tok_s {r['decode_tok_s']} != {want}")
        if problems:
            bad.append(f"line {i}: " + ", ".join(problems))
    check(f"{name}: {len(recs)} records consistent", recs and not bad, "; ".join(bad[:5]))


def reconcile(name: str, url: str, before: dict, doc: dict | None, recs: list[dict]) -> None:
    """The router's counters moved by exactly what results.jsonl and the probes report."""
    if doc is None:
        return
    want = {k: sum(r[k] or 0 for r in recs if r["ok"]) + doc["probe_usage"][k] for k in COUNTERS}
    got = {}
    for _ in range(50):  # the counters are bumped as the generation ends: allow them 5 s
        after = counters(url)
        got = {k: round(after[k] - before[k]) for k in COUNTERS}
        if got == want:
            break
        time.sleep(0.1)
    check(f"{name}: token counts equal the router's counters", got == want,
          f"router {got}, results + probes {want}")


def bad_arguments(tool: Tool, url: str, out: Path) -> None:
    some_run = str(out / "ctx-a")
    cases = [
        ("URL without scheme", ["context-sweep", "--url", "localhost:1", "--model", "m",
                                "--out", str(out / "x")], 2, "is not an http:// or https:// URL"),
        ("no --model", ["concurrency-sweep", "--url", url, "--out", str(out / "x")], 2,
         "the following arguments are required: --model"),
        ("zero streams", ["concurrency-sweep", "--url", url, "--model", "tiny", "--out",
                          str(out / "x"), "--concurrency", "0"], 2, "give stream counts"),
        ("fault without command", ["soak", "--url", url, "--model", "tiny", "--out",
                                   str(out / "x"), "--minutes", "1", "--fault", "10"], 2,
         "a fault is AT:COMMAND"),
        ("fault after the end", ["soak", "--url", url, "--model", "tiny", "--out",
                                 str(out / "x"), "--minutes", "1", "--fault", "2m:true"], 2,
         "after the end of the run"),
        ("negative minutes", ["soak", "--url", url, "--model", "tiny", "--out", str(out / "x"),
                              "--minutes", "-1"], 2, "must be greater than 0"),
        ("max-context below start", ["context-sweep", "--url", url, "--model", "tiny", "--out",
                                     str(out / "x"), "--start", "512", "--max-context", "64"],
         2, "is below --start"),
        ("no workload", [], 2, "name a workload"),
        ("unknown workload", ["warp-speed"], 2, "invalid choice"),
        ("compare one run", ["compare", some_run, "--out", str(out / "x")], 2,
         "at least two runs"),
        ("compare different workloads", ["compare", some_run, str(out / "conc-a"), "--out",
                                         str(out / "x")], 2, "different workloads"),
        ("compare a missing run", ["compare", some_run, str(out / "nothing"), "--out",
                                   str(out / "x")], 2, "no run.json there"),
        ("unreachable server", ["concurrency-sweep", "--url", "http://127.0.0.1:9", "--model",
                                "tiny", "--out", str(out / "x")], 3, "cannot reach"),
        ("unknown model", ["concurrency-sweep", "--url", url, "--model", "no-such-model",
                           "--out", str(out / "x")], 3, "refused the probe request"),
        ("conversations file not JSON", ["multi-turn", "--url", url, "--model", "tiny",
                                         "--out", str(out / "x"), "--conversations",
                                         str(Path(__file__))], 2, "neither JSON nor JSON lines"),
    ]
    for name, args, status, text in cases:
        proc = tool.run(args, timeout=60)
        check(f"bad arguments: {name} -> exit {status} naming the problem",
              proc.returncode == status and text in proc.stderr and
              "Traceback" not in proc.stderr,
              f"exit {proc.returncode}, stderr: {proc.stderr[-600:]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--url-a", required=True)
    ap.add_argument("--url-b", required=True)
    ap.add_argument("--ctx-a", type=int, required=True)
    ap.add_argument("--worker-b-pid", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    signal.alarm(300)  # the C++ test is the backstop; this names where it stopped
    out = Path(a.out)
    tool = Tool(a.bench, out)

    # context-sweep: doubling from 64 to the worker's context, the first refusal ends it.
    before = counters(a.url_a)
    doc, recs = tool.workload("ctx-a", "context-sweep", a.url_a, "--start", "64",
                              "--max-tokens", "16", "--bisect", "2")
    reconcile("ctx-a", a.url_a, before, doc, recs)
    if doc:
        refused = [r for r in recs if not r["ok"]]
        check("ctx-a: refusals recorded as refused (HTTP 400)", refused and all(
            r["error_kind"] == "refused" and r["status"] == 400 for r in refused),
            json.dumps(refused)[:500])
        targets = [r["target_tokens"] for r in recs]
        first_refused = targets.index(refused[0]["target_tokens"]) if refused else -1
        check("ctx-a: doubling up to the first refusal, then bisection",
              targets[:first_refused + 1] == [64 * 2 ** i for i in range(first_refused + 1)]
              and all(64 * 2 ** (first_refused - 1) < t < targets[first_refused]
                      for t in targets[first_refused + 1:]), str(targets))
        ceiling = doc["aggregates"]["ceiling_prompt_tokens"]
        check("ctx-a: ceiling below the context and above half of it",
              ceiling is not None and a.ctx_a // 2 < ceiling <= a.ctx_a - 16, str(ceiling))
        check("ctx-a: summary names the ceiling and the refusal",
              "Context ceiling" in (out / "ctx-a" / "summary.md").read_text() and
              "refused" in (out / "ctx-a" / "summary.md").read_text())

    # multi-turn: tool turns and a resumed turn; cached tokens from the worker's snapshots.
    before = counters(a.url_a)
    doc, recs = tool.workload("mt-a", "multi-turn", a.url_a, "--sessions", "2", "--turns", "3",
                              "--system-tokens", "150", "--user-tokens", "20",
                              "--tool-result-tokens", "30", "--tool-ratio", "1",
                              "--resume-every", "2", "--resume-gap", "0.2", "--think-time",
                              "0.05", "--max-tokens", "8")
    reconcile("mt-a", a.url_a, before, doc, recs)
    if doc:
        shape = sorted((r["session"], r["turn"], r["turn_kind"], r["resumed"]) for r in recs)
        want = sorted((s, t, "user" if t == 0 else "tool", t == 2) for s in (0, 1)
                      for t in range(3))
        check("mt-a: 2 sessions x 3 turns, tool turns, turn 2 resumed", shape == want,
              str(shape))
        later = [r for r in recs if r["turn"] > 0 and r["ok"]]
        check("mt-a: later turns report cached tokens", later and all(
            (r["cached_tokens"] or 0) > 0 for r in later), str([r["cached_tokens"] for r in later]))
        check("mt-a: prompts grow turn by turn", all(
            a_["prompt_tokens"] < b_["prompt_tokens"] for a_, b_ in
            zip(sorted(later + [r for r in recs if r["turn"] == 0],
                       key=lambda r: (r["session"], r["turn"])),
                sorted(later + [r for r in recs if r["turn"] == 0],
                       key=lambda r: (r["session"], r["turn"]))[1:])
            if a_["session"] == b_["session"]))

    # multi-turn replaying vLLM's conversation JSON on server B.
    conv = out / "conversations.json"
    conv.write_text(json.dumps([
        {"id": "c0", "messages": [{"role": "user", "content": "Hello there, list three colours."},
                                  {"role": "assistant", "content": "Red, green, blue."},
                                  {"role": "user", "content": "And three animals?"}]},
        {"id": "c1", "conversations": [{"from": "human", "value": "Name a river."}]}]))
    doc, recs = tool.workload("replay-b", "multi-turn", a.url_b, "--sessions", "2",
                              "--conversations", str(conv), "--max-tokens", "4",
                              "--think-time", "0")
    if doc:
        check("replay-b: the file's user turns, in order", sorted(
            (r["session"], r["turn"]) for r in recs) == [(0, 0), (0, 1), (1, 0)],
            str([(r["session"], r["turn"]) for r in recs]))

    # concurrency-sweep on both servers, then compare.
    for name, url in (("conc-a", a.url_a), ("conc-b", a.url_b)):
        before = counters(url)
        doc, recs = tool.workload(name, "concurrency-sweep", url, "--concurrency", "1,2",
                                  "--requests", "4", "--prompt-tokens", "80", "--max-tokens", "8",
                                  "--shared-prefix", "0.5")
        reconcile(name, url, before, doc, recs)
        if doc:
            rows = doc["aggregates"]["rows"]
            check(f"{name}: one row per level with its requests",
                  [(r["concurrency"], r["requests"], r["ok"]) for r in rows] ==
                  [(1, 4, 4), (2, 4, 4)], str(rows)[:300])
            check(f"{name}: throughput and percentiles present", all(
                r["output_tok_s"] and r["ttft_s_p50"] <= r["ttft_s_p90"] <= r["ttft_s_p99"]
                for r in rows))
    proc = tool.run(["compare", str(out / "conc-a"), str(out / "conc-b") + "/run.json",
                     "--out", str(out / "compare")])
    if check("compare: exit 0", proc.returncode == 0, proc.stderr[-2000:]):
        text = (out / "compare" / "compare.md").read_text()
        check("compare: table with both runs and ratios", "conc-a" in text and "conc-b" in text
              and "ratio" in text and "×" in text, text[:500])
        png_ok("compare: compare-concurrency-sweep.png",
               out / "compare" / "compare-concurrency-sweep.png")

    # The Anthropic Messages API, same reconciliation.
    before = counters(a.url_a)
    doc, recs = tool.workload("anthropic-a", "concurrency-sweep", a.url_a, "--api", "anthropic",
                              "--concurrency", "2", "--requests", "2", "--prompt-tokens", "60",
                              "--max-tokens", "6")
    reconcile("anthropic-a", a.url_a, before, doc, recs)

    # structured: response_format off and on; valid JSON whenever the constrained answer ended.
    doc, recs = tool.workload("structured-a", "structured", a.url_a, "--concurrency", "1",
                              "--requests", "2", "--prompt-tokens", "60", "--max-tokens", "400")
    if doc:
        on = [r for r in recs if r["response_format"] == "on" and r["ok"]]
        check("structured-a: constrained answers that ended are valid JSON", on and all(
            r["json_valid"] for r in on if r["finish_reason"] == "stop"),
            str([(r["finish_reason"], r["output"][:80]) for r in on]))
        check("structured-a: both modes recorded", sorted(
            {r["response_format"] for r in recs}) == ["off", "on"])

    bad_arguments(tool, a.url_a, out)

    # soak on server B; its fault hook kills B's worker: the requests after it are lost and
    # counted by kind, the run still ends with its report.
    doc, recs = tool.workload("soak-b", "soak", a.url_b, "--minutes", "0.1", "--concurrency",
                              "2", "--system-tokens", "60", "--user-tokens", "10",
                              "--max-tokens", "4", "--fault", f"2:kill -9 {a.worker_b_pid}",
                              "--fault-window", "1", "--error-backoff", "0.2", timeout=90)
    if doc:
        agg = doc["aggregates"]
        fault_at = agg["faults"][0]["started_s"] if agg["faults"] else None
        check("soak-b: the hook ran once, exit 0", len(agg["faults"]) == 1 and
              agg["faults"][0]["exit_status"] == 0, json.dumps(agg["faults"]))
        lost_after = [r for r in recs if not r["ok"] and r["t_start"] > (fault_at or 0) + 0.5]
        ok_before = [r for r in recs if r["ok"] and r["t_end"] < (fault_at or 0)]
        check("soak-b: answered before the fault, lost after it", ok_before and lost_after and
              not any(r["ok"] for r in recs if r["t_start"] > fault_at + 0.5),
              f"{len(ok_before)} ok before, {len(lost_after)} lost after")
        check("soak-b: lost requests counted by kind", agg["lost"] == sum(
            agg["lost_by_kind"].values()) == sum(1 for r in recs if not r["ok"]) and
            agg["lost"] == agg["lost_in_flight"] + agg["lost_not_in_flight"],
            json.dumps({k: agg[k] for k in ("lost", "lost_by_kind", "lost_in_flight")}))
        windows = agg["fault_windows"][0]["windows"] if agg["fault_windows"] else {}
        check("soak-b: before / during / after windows", set(windows) ==
              {"before", "during", "after"} and windows["before"]["ok"] > 0 and
              windows["after"]["ok"] == 0, json.dumps(windows)[:400])

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
