#!/usr/bin/env python3
"""Decode speed with an output constraint vs without (issue 13's target: >= 0.9x).

Starts deltaserve-worker on MODEL (--threads, one sequence at a time) and deltaserve-router on
127.0.0.1, then sends the same chat request R times per mode, alternating modes so that drift
hits both alike:

  free    no constraint
  schema  response_format json_schema: an array of exactly --items integers 0..9 (a long
          document whose every token is masked)
  tool    tool_choice naming a function whose parameters are an enum, a bounded integer and a
          string of at most 60 characters, in the model's call format

Speed is the worker's own figure per request (its log line: completion tokens and decode_ms, the
time from the first token to the last), so HTTP and prefill are out of it: tok/s = (completion
- 1) / decode_ms. Reports the median per mode and the ratio to `free`. Run it through
bench/constrained_decode_bench.sh, which holds the benchmark lock.

  bench/constrained_decode_bench.sh --model build/bench/synth-0.8b-q4_k_m.gguf --threads 2
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Process:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, pattern, timeout=300):
        deadline = time.time() + timeout
        rx = re.compile(pattern)
        with self.cv:
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.time()
                if left <= 0 or self.p.poll() is not None:
                    raise RuntimeError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines))
                self.cv.wait(left)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def post(port, path, body, request_id):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": request_id})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(REPO, "build/bench/synth-0.8b-q4_k_m.gguf"))
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build/release"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--items", type=int, default=150)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--json", action="store_true", help="print the raw rows as JSON lines")
    args = ap.parse_args()

    worker = Process([os.path.join(args.bin_dir, "worker/deltaserve-worker"), "--model",
                      "bench=" + args.model, "--listen", "127.0.0.1:0", "--threads",
                      str(args.threads), "--ctx", "2048", "--parallel", "1"])
    router = None
    try:
        addr = worker.wait_for(r"listening on (\S+)").group(1)
        router = Process([os.path.join(args.bin_dir, "router/deltaserve-router"), "--listen",
                          "127.0.0.1:0", "--worker", addr])
        port = int(router.wait_for(r"listening on \S+:(\d+)").group(1))
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2)
                break
            except Exception:  # noqa: BLE001 -- not ready yet
                time.sleep(0.2)

        base = {"model": "bench", "temperature": 1.0, "seed": 5, "max_tokens": args.max_tokens,
                "messages": [{"role": "user", "content": "List some digits."}],
                "chat_template_kwargs": {"enable_thinking": False}}
        schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                  "minItems": args.items, "maxItems": args.items}
        tool = {"type": "function", "function": {"name": "note", "parameters": {
            "type": "object", "properties": {
                "kind": {"type": "string", "enum": ["alpha", "beta", "gamma"]},
                "count": {"type": "integer", "minimum": 0, "maximum": 1000},
                "text": {"type": "string", "maxLength": 60}},
            "required": ["kind", "count", "text"]}}}
        modes = {
            "free": {},
            "schema": {"response_format": {"type": "json_schema", "json_schema": {
                "name": "digits", "schema": schema}}},
            "tool": {"tools": [tool], "tool_choice": {"type": "function",
                                                      "function": {"name": "note"}}},
        }
        post(port, "/v1/chat/completions", dict(base, max_tokens=8), "warmup")
        rows = []
        for rep in range(args.reps):
            for mode, extra in modes.items():
                rid = f"bench-{mode}-{rep}"
                body = dict(base, seed=5 + rep, **extra)
                r = post(port, "/v1/chat/completions", body, rid)
                m = worker.wait_for(rf"request id={re.escape(rid)} .*completion=(\d+) .*"
                                    rf"decode_ms=([\d.]+)")
                completion, decode_ms = int(m.group(1)), float(m.group(2))
                rows.append({"mode": mode, "rep": rep, "completion": completion,
                             "decode_ms": decode_ms,
                             "tok_s": (completion - 1) / decode_ms * 1000 if decode_ms else 0,
                             "finish": r["choices"][0]["finish_reason"]})
                if args.json:
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        if router:
            router.stop()
        worker.stop()

    free = statistics.median(r["tok_s"] for r in rows if r["mode"] == "free")
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, {args.reps} reps, "
          f"temperature 1.0, one sequence at a time")
    print("| mode | completion tokens (median) | decode tok/s (median) | vs free |")
    print("| --- | --- | --- | --- |")
    for mode in modes:
        sel = [r for r in rows if r["mode"] == mode]
        tps = statistics.median(r["tok_s"] for r in sel)
        toks = statistics.median(r["completion"] for r in sel)
        print(f"| {mode} | {toks:.0f} | {tps:.2f} | {tps / free:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
