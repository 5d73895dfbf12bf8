#!/usr/bin/env python3
"""schemathesis against a running deltaserve-router, checked against docs/openapi.yaml.

Run by tests/integration/schemathesis_test.cc (label integration), which starts a worker on the
tiny golden model and a router that serves it as "qwen3.5-4b" (the model of the description's
examples), then calls

    python3 schemathesis_check.py --spec docs/openapi.yaml --url http://127.0.0.1:PORT \
        --mode open|keyed [--api-key KEY] --out DIR [--max-examples N] [--seed S]

Each mode runs the `schemathesis` CLI (installed beside this interpreter) with a fixed seed, one
worker and a bounded number of examples per operation, through the phases examples (the
description's request examples, which use the served model, so real generations — JSON and SSE —
are checked), coverage (boundary and invalid values of every field) and fuzzing. Checks:
not_a_server_error, status_code_conformance, content_type_conformance,
response_schema_conformance (each SSE event's JSON too), response_headers_conformance
(X-Request-Id, Retry-After), negative_data_rejection (schemathesis.toml: invalid bodies must be
400) and unsupported_method (405 with Allow). Then the HAR report is read to make sure the run
reached what it is meant to exercise, so a run that never got past, say, a 401 cannot pass:

  open   no API keys: every operation answered 200; the three POSTs 200 as JSON and as SSE, 400
         and 404 (unknown model); /v1/messages the same (its SSE ending in message_stop);
         count_tokens, /tokenize and /detokenize 200 and 400.
  keyed  the router has API keys; with --api-key (a key limited to qwen3.5-4b with a small
         requests-per-minute budget): 200, 403 (other model names) and 429 with Retry-After on
         the POSTs, 200 on /v1/models listing only qwen3.5-4b; then a second run without a key:
         401 on every /v1/ operation for valid bodies, 400 for invalid ones, probes still 200.

Exit status 0 only when schemathesis passed every run and every expectation held.
"""

import argparse
import collections
import json
import os
import subprocess
import sys

CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "unsupported_method",
])
HERE = os.path.dirname(os.path.abspath(__file__))
CHAT = ("POST", "/v1/chat/completions")
TEXT = ("POST", "/v1/completions")
RESPONSES = ("POST", "/v1/responses")
MODELS = ("GET", "/v1/models")
MESSAGES = ("POST", "/v1/messages")
COUNT_TOKENS = ("POST", "/v1/messages/count_tokens")
TOKENIZE = ("POST", "/tokenize")
DETOKENIZE = ("POST", "/detokenize")
PROBES = [("GET", "/health"), ("GET", "/ready"), ("GET", "/metrics")]
SERVED_MODEL = "qwen3.5-4b"


def schemathesis_cli():
    # The console script installed with the package, beside this interpreter (a venv's bin/).
    path = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    return [path] if os.access(path, os.X_OK) else [
        sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()"]


# One schemathesis run (about 3,600 cases): 7 minutes seen at load 12 on the 2-core machine.
RUN_SECONDS = 1200


def run_schemathesis(args, name, extra):
    har = os.path.join(args.out, name + ".har")
    cmd = schemathesis_cli() + [
        "--config-file", os.path.join(HERE, "schemathesis.toml"),
        "--no-color",
        "run", args.spec,
        "--url", args.url,
        "--checks", CHECKS,
        "--phases", "examples,coverage,fuzzing",
        "--max-examples", str(args.max_examples),
        "--seed", str(args.seed),
        "--workers", "1",
        "--generation-database", "none",
        "--request-timeout", "60",
        "--report", "har",
        "--report-har-path", har,
    ] + extra
    print("$ " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, SCHEMATHESIS_TELEMETRY="false"),
                              timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else e.output
        print(out or "", flush=True)
        print(f"FAIL: schemathesis ({name}) did not finish within {RUN_SECONDS} s", flush=True)
        sys.exit(1)
    print(proc.stdout, flush=True)
    return proc.returncode, har


def read_har(path):
    """(method, path) -> list of (status, content type, headers dict, body text)."""
    seen = collections.defaultdict(list)
    with open(path, encoding="utf-8") as f:
        har = json.load(f)
    for entry in har["log"]["entries"]:
        req, resp = entry["request"], entry["response"]
        url = req["url"]
        path = "/" + url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        headers = {h["name"].lower(): h["value"] for h in resp.get("headers", [])}
        body = resp.get("content", {}).get("text", "") or ""
        seen[(req["method"], path)].append(
            (resp["status"], headers.get("content-type", ""), headers, body))
    return seen


class Expectations:
    def __init__(self, seen, run):
        self.seen, self.run, self.failures = seen, run, []

    def need(self, op, what, predicate):
        answers = self.seen.get(op, [])
        if not any(predicate(*a) for a in answers):
            statuses = collections.Counter(a[0] for a in answers)
            self.failures.append(f"{self.run}: {op[0]} {op[1]}: no {what} among "
                                 f"{len(answers)} answers (statuses {dict(statuses)})")

    def status(self, op, code):
        self.need(op, f"{code}", lambda s, ct, h, b: s == code)

    def json_200(self, op):
        self.need(op, "200 application/json",
                  lambda s, ct, h, b: s == 200 and ct.startswith("application/json"))

    def responses_sse_200(self, op):
        # A finished Responses stream: its last event is response.completed or .incomplete.
        self.need(op, "200 text/event-stream ending in response.completed / .incomplete",
                  lambda s, ct, h, b: s == 200 and ct.startswith("text/event-stream") and
                  ("event: response.completed" in b or "event: response.incomplete" in b))

    def messages_sse_200(self, op):
        # A finished Anthropic stream: its last event is message_stop.
        self.need(op, "200 text/event-stream ending in message_stop",
                  lambda s, ct, h, b: s == 200 and ct.startswith("text/event-stream") and
                  "event: message_stop" in b)

    def sse_200(self, op):
        # A finished stream: its last event is [DONE] (the events themselves are validated by
        # response_schema_conformance).
        self.need(op, "200 text/event-stream ending in [DONE]",
                  lambda s, ct, h, b: s == 200 and ct.startswith("text/event-stream") and
                  b.rstrip().endswith("data: [DONE]"))


def summary(seen):
    documented = {CHAT, TEXT, RESPONSES, MODELS, MESSAGES, COUNT_TOKENS, TOKENIZE, DETOKENIZE,
                  *PROBES}
    for op in sorted(o for o in seen if o in documented):
        counts = collections.Counter(a[0] for a in seen[op])
        print(f"  {op[0]} {op[1]}: {len(seen[op])} requests, statuses {dict(sorted(counts.items()))}")
    others = [a[0] for op in seen if op not in documented for a in seen[op]]
    if others:
        counts = collections.Counter(others)
        print(f"  undocumented methods: {len(others)} requests, statuses {dict(sorted(counts.items()))}")


def run_and_expect(args, name, title, extra, failures):
    """Runs schemathesis as `name`, prints what it saw under `title`, and returns the
    Expectations over its exchanges (a non-zero exit is one of `failures`)."""
    rc, har = run_schemathesis(args, name, extra + ["--generation-with-security-parameters",
                                                    "false"])
    if rc != 0:
        failures.append(f"{name}: schemathesis exited {rc}")
    seen = read_har(har)
    print(f"{title}:")
    summary(seen)
    return seen, Expectations(seen, name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--mode", choices=["open", "keyed"], required=True)
    p.add_argument("--api-key", default="")
    p.add_argument("--out", required=True, help="folder for the HAR reports")
    p.add_argument("--max-examples", type=int, default=40)
    p.add_argument("--seed", type=int, default=17)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    failures = []
    if args.mode == "open":
        seen, e = run_and_expect(args, "open", "open run", [], failures)
        for op in [MODELS] + PROBES:
            e.json_200(op) if op != ("GET", "/metrics") else e.status(op, 200)
        for op in (CHAT, TEXT):
            e.json_200(op)
            e.sse_200(op)
            e.status(op, 400)
            e.status(op, 404)
        e.json_200(RESPONSES)
        e.responses_sse_200(RESPONSES)
        e.status(RESPONSES, 400)
        e.status(RESPONSES, 404)
        e.json_200(MESSAGES)
        e.messages_sse_200(MESSAGES)
        for op in (MESSAGES, COUNT_TOKENS, TOKENIZE, DETOKENIZE):
            e.status(op, 400)
        e.status(MESSAGES, 404)
        for op in (COUNT_TOKENS, TOKENIZE, DETOKENIZE):
            e.json_200(op)
        failures += e.failures
    else:
        if not args.api_key:
            p.error("--mode keyed needs --api-key")
        seen, e = run_and_expect(args, "keyed", "keyed run (with the key)",
                                 ["--header", f"Authorization: Bearer {args.api_key}"], failures)
        for op in (CHAT, TEXT, RESPONSES):
            e.status(op, 200)
            e.status(op, 400)
            e.status(op, 403)
        e.need(CHAT, "429 with Retry-After", lambda s, ct, h, b: s == 429 and "retry-after" in h)
        e.need(MODELS, f"200 listing only {SERVED_MODEL}",
               lambda s, ct, h, b: s == 200 and
               [m["id"] for m in json.loads(b)["data"]] == [SERVED_MODEL])
        failures += e.failures

        seen, e = run_and_expect(args, "keyless", "keyed run (without a key)", [], failures)
        for op in (CHAT, TEXT, RESPONSES):
            e.status(op, 401)
            e.status(op, 400)
            if any(200 <= a[0] < 300 for a in seen.get(op, [])):
                e.failures.append(f"keyless: {op[0]} {op[1]} answered 2xx without a key")
        e.status(MODELS, 401)
        if any(a[0] != 401 for a in seen.get(MODELS, []) if a[0] != 405):
            e.failures.append("keyless: GET /v1/models answered something else than 401")
        for op in PROBES:
            e.status(op, 200)
        failures += e.failures

    for f in failures:
        print("FAIL " + f)
    print("PASS" if not failures else f"{len(failures)} expectation(s) failed", flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
