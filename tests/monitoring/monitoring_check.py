#!/usr/bin/env python3
"""Checks of DeltaServe's metrics, dashboards and alerts (tests/monitoring/CMakeLists.txt).

  monitoring_check.py dashboards            (label deploy)
      deploy/grafana/*.json: valid JSON, equal to what make_dashboards.py writes, the
      ${datasource} template variable on every panel and target, $__rate_interval in every
      range, no instance written into a query; every panel expression, with the template
      variables substituted, passes `promtool check rules` as a recording rule.
  monitoring_check.py alerts                (label deploy)
      deploy/prometheus/alerts.yaml: promtool check rules, promtool test rules alerts_test.yaml;
      promtool check config on prometheus.example.yml.
  monitoring_check.py metrics-lint ROUTER WORKER GOLDEN_DIR       (label integration)
      a real worker (tiny MoE model, Redis tier, speculation) and router serve traffic; their
      /metrics pass `promtool check metrics`, and the series the dashboards need exist.
  monitoring_check.py prometheus ROUTER WORKER GOLDEN_DIR         (label integration)
      the same processes scraped every second by Debian's prometheus on 127.0.0.1; after the
      traffic is scraped, every panel query of both dashboards, run through Prometheus's HTTP
      API, returns at least one finite sample.

promtool, prometheus and redis-server come from deploy/install-deps.sh; when one is missing the
test fails (it does not skip)."""
import glob
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "deploy", "grafana")
PROMETHEUS_DIR = os.path.join(ROOT, "deploy", "prometheus")
# What the template variables become outside Grafana: every instance and model, and a window
# long enough to hold the scrapes before and after the test's traffic.
SUBSTITUTIONS = {"$__rate_interval": "5m", "$instance": ".*", "$model": ".*", "$upstream": ".*"}


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def tool(name):
    path = shutil.which(name)
    if path is None:
        fail(f"{name} is not installed (deploy/install-deps.sh installs Debian's prometheus and "
             f"redis-server)")
    return path


def dashboards():
    paths = sorted(glob.glob(os.path.join(GRAFANA, "*.json")))
    if len(paths) < 2:
        fail(f"expected the overview and worker dashboards in {GRAFANA}")
    return [(p, json.load(open(p))) for p in paths]


def panel_queries(board):
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel, target["expr"]


def substitute(expr):
    for k, v in SUBSTITUTIONS.items():
        expr = expr.replace(k, v)
    return expr


def check_dashboards():
    promtool = tool("promtool")
    # The committed JSON is what the generator writes.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(GRAFANA, "make_dashboards.py"), tmp)
        subprocess.run([sys.executable, os.path.join(tmp, "make_dashboards.py")], check=True,
                       capture_output=True)
        for p in glob.glob(os.path.join(tmp, "*.json")):
            committed = os.path.join(GRAFANA, os.path.basename(p))
            if not os.path.exists(committed) or open(p).read() != open(committed).read():
                fail(f"{committed} differs from what make_dashboards.py writes: run it")
    rules = []
    for path, board in dashboards():
        name = os.path.basename(path)
        variables = {v["name"]: v for v in board["templating"]["list"]}
        ds = variables.get("datasource")
        if ds is None or ds["type"] != "datasource" or ds["query"] != "prometheus":
            fail(f"{name}: no 'datasource' template variable of type datasource (prometheus)")
        uids = set()
        n = 0
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            if panel.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{name}: panel '{panel['title']}' does not use ${{datasource}}")
            if not panel.get("targets"):
                fail(f"{name}: panel '{panel['title']}' has no query")
            for t in panel["targets"]:
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    fail(f"{name}: a target of '{panel['title']}' does not use ${{datasource}}")
            if panel["id"] in uids:
                fail(f"{name}: panel id {panel['id']} twice")
            uids.add(panel["id"])
        for panel, expr in panel_queries(board):
            n += 1
            # Every range is Grafana's rate interval; no instance, job or pod is hard-coded.
            for window in re.findall(r"\[([^\]]*)\]", expr):
                if window != "$__rate_interval":
                    fail(f"{name}: '{panel['title']}' uses the range [{window}]: {expr}")
            for label in ("instance", "job", "pod", "worker", "namespace"):
                for m in re.finditer(label + r'\s*(=~|!~|=|!=)\s*"([^"]*)"', expr):
                    if not m.group(2).startswith("$"):
                        fail(f"{name}: '{panel['title']}' hard-codes {label}: {expr}")
            for var in re.findall(r"\$([A-Za-z_]\w*)", expr):
                if var not in variables and var != "__rate_interval":
                    fail(f"{name}: '{panel['title']}' uses ${var}, not a template variable")
            rules.append({"record": f"deltaserve:panel_{len(rules)}", "expr": substitute(expr)})
        print(f"{name}: {n} queries in {len(board['panels'])} panels and rows")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump({"groups": [{"name": "dashboards", "rules": rules}]}, f)  # YAML is JSON
        rules_path = f.name
    r = subprocess.run([promtool, "check", "rules", rules_path], capture_output=True, text=True)
    os.unlink(rules_path)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        fail("promtool check rules refused a panel expression")


def check_alerts():
    promtool = tool("promtool")
    for args in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts_test.yaml"],
                 ["check", "config", "prometheus.example.yml"]):
        r = subprocess.run([promtool] + args, cwd=PROMETHEUS_DIR, capture_output=True, text=True)
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            fail(f"promtool {' '.join(args)} failed")


# ---- the running stack ------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout=60.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    fail(f"timed out waiting for {what}")


class Proc:
    def __init__(self, name, args, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def text(self):
        return open(self.log_path, errors="replace").read()

    def wait_line(self, pattern, timeout=120):
        def seen():
            if self.p.poll() is not None:
                fail(f"{self.name} exited ({self.p.returncode}):\n{self.text()[-3000:]}")
            return re.search(pattern, self.text())
        return wait_for(f"{self.name}: /{pattern}/", seen, timeout)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def http(port, method, path, body=None, headers=None, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class Stack:
    """redis-server, a worker on the tiny MoE model (Redis tier, speculation) and a router."""

    def __init__(self, tmp):
        self.tmp_dir = tmp
        self.procs = []

    def launch(self, router_bin, worker_bin, golden_dir):
        redis = tool("redis-server")
        self.redis_port = free_port()
        r = self.start("redis", [redis, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", self.tmp_dir])
        r.wait_line(r"Ready to accept connections")
        w = self.start("worker", [worker_bin, "--model",
                                  f"tiny={os.path.join(golden_dir, 'tiny-moe-f32.gguf')}",
                                  "--listen", "127.0.0.1:0", "--metrics-port", "0", "--ctx", "512",
                                  "--parallel", "2", "--speculation", "--snapshot-ram", "64MiB",
                                  "--redis", f"redis://127.0.0.1:{self.redis_port}",
                                  "--log-format", "json"])
        self.worker_port = int(w.wait_line(r"listening on 127\.0\.0\.1:(\d+)").group(1))
        self.worker_metrics = int(w.wait_line(r"metrics on 127\.0\.0\.1:(\d+)").group(1))
        # The router is also its own upstream model (docs/upstreams.md): "tiny-upstream" is
        # "tiny" asked again over HTTP, so the upstream panels have data.
        port = free_port()
        config = os.path.join(self.tmp_dir, "router.yaml")
        with open(config, "w") as f:
            json.dump({"upstreams": [{"name": "tiny-upstream", "kind": "openai", "model": "tiny",
                                      "base_url": f"http://127.0.0.1:{port}/v1"}]}, f)
        rt = self.start("router", [router_bin, "--listen", f"127.0.0.1:{port}", "--worker",
                                   f"127.0.0.1:{self.worker_port}", "--config", config,
                                   "--log-format", "json"])
        self.router_port = int(rt.wait_line(r"listening on 127\.0\.0\.1:(\d+)").group(1))
        wait_for("the router to be ready",
                 lambda: http(self.router_port, "GET", "/ready")[0] == 200)

    def start(self, name, args):
        p = Proc(name, args, self.tmp_dir)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            p.stop()

    def chat(self, content, stream=False, model="tiny", max_tokens=12, history=()):
        messages = list(history) + [{"role": "user", "content": content}]
        body = {"model": model, "messages": messages, "max_tokens": max_tokens,
                "temperature": 0, "stream": stream}
        return http(self.router_port, "POST", "/v1/chat/completions", body)

    def traffic(self):
        """A streamed request, non-streamed ones, a repeated conversation (a snapshot hit), a
        text completion and an error (unknown model, 404)."""
        status, headers, body = self.chat("Tell me a story about a lighthouse.", stream=True,
                                          max_tokens=24)
        if status != 200 or "data: [DONE]" not in body:
            fail(f"streamed chat: {status} {body[:300]}")
        first = self.chat("What is a hybrid model?")
        if first[0] != 200:
            fail(f"chat: {first}")
        answer = json.loads(first[2])["choices"][0]["message"]["content"]
        history = [{"role": "user", "content": "What is a hybrid model?"},
                   {"role": "assistant", "content": answer}]
        second = self.chat("And why is it fast?", history=history)
        if second[0] != 200:
            fail(f"second turn: {second}")
        status, _, body = http(self.router_port, "POST", "/v1/completions",
                               {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 8})
        if status != 200:
            fail(f"completion: {status} {body[:300]}")
        status, _, body = self.chat("hi", model="no-such-model")
        if status != 404:
            fail(f"unknown model: expected 404, got {status} {body[:300]}")
        status, _, body = self.chat("Through the upstream.", model="tiny-upstream")
        if status != 200:
            fail(f"chat through the upstream: {status} {body[:300]}")
        return 6  # generation requests sent (the upstream's second pass through the router aside)


def start_stack(router_bin, worker_bin, golden_dir, tmp):
    s = Stack(tmp)
    try:
        s.launch(router_bin, worker_bin, golden_dir)
    except SystemExit:
        for p in s.procs:
            print(f"--- {p.name}\n{p.text()[-2000:]}", file=sys.stderr)
            p.stop()
        raise
    return s


def scrape(port):
    status, headers, body = http(port, "GET", "/metrics")
    if status != 200:
        fail(f"GET /metrics on {port}: {status}")
    return body


def check_metrics_lint(router_bin, worker_bin, golden_dir):
    promtool = tool("promtool")
    with tempfile.TemporaryDirectory() as tmp:
        s = start_stack(router_bin, worker_bin, golden_dir, tmp)
        try:
            s.traffic()
            for name, port in (("router", s.router_port), ("worker", s.worker_metrics)):
                text = scrape(port)
                r = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                                   capture_output=True)
                if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                    fail(f"promtool check metrics on the {name}'s /metrics:\n{r.stdout}{r.stderr}")
                print(f"{name}: {len(text.splitlines())} lines, promtool check metrics clean")
            # Every metric name the dashboards query is exported by one of the two processes.
            exported = set(re.findall(r"^# TYPE (\S+) (\S+)", scrape(s.router_port) +
                                      scrape(s.worker_metrics), re.M))
            names = {n for n, _ in exported}
            hist = {n for n, t in exported if t == "histogram"}
            for path, board in dashboards():
                for panel, expr in panel_queries(board):
                    for metric in re.findall(r"\b(deltaserve_[a-z0-9_]+)", expr):
                        base = metric[:-len("_bucket")] if metric.endswith("_bucket") else metric
                        if metric not in names and base not in hist:
                            fail(f"{os.path.basename(path)} '{panel['title']}' queries {metric}, "
                                 f"which neither process exports")
            # The request id of a request appears in the router's and the worker's log line.
            rid = "monitoring-check-1"
            status, headers, _ = http(s.router_port, "POST", "/v1/chat/completions",
                                      {"model": "tiny", "max_tokens": 2,
                                       "messages": [{"role": "user", "content": "x"}]},
                                      headers={"X-Request-Id": rid})
            if status != 200 or headers.get("X-Request-Id") != rid:
                fail(f"X-Request-Id not echoed: {status} {headers}")
            for p in s.procs[1:]:
                wait_for(f"{p.name}'s log line for {rid}",
                         lambda p=p: any(json.loads(l).get("id") == rid
                                         for l in p.text().splitlines() if l.startswith("{")))
        finally:
            s.stop()


def prometheus_query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as r:
        reply = json.load(r)
    if reply.get("status") != "success":
        fail(f"query {expr}: {reply}")
    return reply["data"]["result"]


def finite_values(result):
    out = []
    for sample in result:
        v = float(sample["value"][1])
        if math.isfinite(v):
            out.append(v)
    return out


def check_prometheus(router_bin, worker_bin, golden_dir):
    prometheus = tool("prometheus")
    with tempfile.TemporaryDirectory() as tmp:
        s = start_stack(router_bin, worker_bin, golden_dir, tmp)
        prom_port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            json.dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                       "scrape_configs": [
                           {"job_name": "deltaserve-router",
                            "static_configs": [{"targets": [f"127.0.0.1:{s.router_port}"]}]},
                           {"job_name": "deltaserve-worker",
                            "static_configs": [{"targets": [f"127.0.0.1:{s.worker_metrics}"]}]}]},
                      f)
        try:
            p = s.start("prometheus", [prometheus, f"--config.file={config}",
                                       f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                       f"--web.listen-address=127.0.0.1:{prom_port}"])
            p.wait_line(r"Server is ready to receive web requests")
            # Both targets scraped once before the traffic, so every counter's increase falls
            # between two scrapes. A first request creates the per-model series first.
            wait_for("both targets up", lambda: len(
                [v for v in finite_values(prometheus_query(prom_port, "up")) if v == 1]) == 2)
            # The warm-up: one request that succeeds and one that fails (so the error series
            # too exists before the traffic).
            if s.chat("warm up", max_tokens=2)[0] != 200 or s.chat("x", model="nope")[0] != 404:
                fail("warm-up requests did not end 200 and 404")
            seen = lambda: finite_values(prometheus_query(
                prom_port, 'sum(deltaserve_router_requests_total{code="200"})'))
            wait_for("the warm-up request scraped", lambda: seen() and seen()[0] >= 1)
            n = s.traffic()
            wait_for("the traffic scraped", lambda: (lambda v: v and v[0] >= 2 + n)(finite_values(
                prometheus_query(prom_port, "sum(deltaserve_router_requests_total)"))), timeout=60)
            # The worker's counters too, then two more scrapes of both targets (a series that
            # appeared with the traffic needs two samples for rate()).
            wait_for("the worker's requests scraped", lambda: (lambda v: v and v[0] >= n)(
                finite_values(prometheus_query(prom_port, "sum(deltaserve_worker_requests_total)"))))
            since = min(finite_values(prometheus_query(prom_port, "timestamp(up)")))
            wait_for("two more scrapes", lambda: min(finite_values(
                prometheus_query(prom_port, "timestamp(up)"))) >= since + 2)
            failures = []
            count = 0
            for path, board in dashboards():
                for panel, expr in panel_queries(board):
                    count += 1
                    values = finite_values(prometheus_query(prom_port, substitute(expr)))
                    if not values:
                        failures.append(f"{os.path.basename(path)} '{panel['title']}': no finite "
                                        f"sample for {substitute(expr)}")
            if failures:
                fail("panel queries without data:\n  " + "\n  ".join(failures))
            print(f"all {count} panel queries returned data")
        finally:
            s.stop()


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    mode = sys.argv[1]
    if mode == "dashboards":
        check_dashboards()
    elif mode == "alerts":
        check_alerts()
    elif mode in ("metrics-lint", "prometheus") and len(sys.argv) == 5:
        (check_metrics_lint if mode == "metrics-lint" else check_prometheus)(*sys.argv[2:5])
    else:
        fail(__doc__)
    print("OK")


if __name__ == "__main__":
    main()
