#!/usr/bin/env python3
"""Checks of the Helm chart helm/deltaserve without a cluster (ctest label `deploy`).

    helm_chart_check.py lint                    helm lint --strict with every ci/*-values.yaml
    helm_chart_check.py render VALUES.yaml      render, then kubernetes-validate --strict, the
                                                ServiceMonitors against the prometheus-operator
                                                schema, and the cross-references between objects
    helm_chart_check.py router-config VALUES.yaml [ROUTER]
                                                the rendered router.yaml loaded by the real
                                                deltaserve-router (it must start and listen)
    helm_chart_check.py worker-args VALUES.yaml WORKER MODEL.gguf
                                                each pool's rendered command line passes
                                                deltaserve-worker --check-args (GPU pools too),
                                                and each CPU pool's starts the real worker
    helm_chart_check.py schema-rejects          values.schema.json and the templates refuse
                                                bad values, naming them

Renders with helm-python-sdk (Helm v4's Go SDK as a C library, from PyPI: a real Helm
renderer, no binary needed), validates with kubernetes-validate (the Kubernetes OpenAPI
schemas, strict: unknown fields fail) and check-jsonschema. The ServiceMonitor schema is the
one of cloudcoil-models-prometheus-operator, models generated from prometheus-operator's
published CRD (its openAPIV3Schema), turned into JSON Schema by pydantic and closed
(additionalProperties: false, as a structural CRD prunes unknown fields): no PyPI package ships
the CRD's YAML itself.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import yaml

import helm_python as helm

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "deltaserve"
RELEASE, NAMESPACE = "ds", "llm"
BIN = pathlib.Path(sys.executable).parent


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def load_values(path):
    return helm.values_from_yaml(pathlib.Path(path).read_text()) if path else {}


def render(values):
    chart = helm.Chart.load(str(CHART))
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs = []
    for name, text in sorted(out.items()):
        if name.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return docs


def cmd_lint():
    files = sorted((CHART / "ci").glob("*-values.yaml"))
    if not files:
        fail("no ci/*-values.yaml")
    for f in files:
        report = helm.lint(str(CHART), load_values(f), strict=True, namespace=NAMESPACE)
        bad = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
        errors = report.get("errors") or []
        for m in report.get("messages") or []:
            print(f"{f.name}: [{m.get('severity')}] {m.get('path')}: {m.get('error')}")
        if bad or errors:
            fail(f"helm lint --strict with {f.name}: {bad} {errors}")
        print(f"helm lint --strict {f.name}: {report.get('total_charts_linted')} chart(s), clean")


def closed(schema):
    """additionalProperties: false on every object schema that lists properties."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
        for v in schema.values():
            closed(v)
    elif isinstance(schema, list):
        for v in schema:
            closed(v)
    return schema


def service_monitor_schema():
    from cloudcoil.models.prometheus_operator import v1 as monitoring

    return closed(monitoring.ServiceMonitor.model_json_schema(by_alias=True))


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def pod_template(obj):
    return obj["spec"]["template"]


def containers(obj):
    spec = pod_template(obj)["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def check_refs(docs, values):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        assert d["metadata"].get("namespace") in (None, NAMESPACE), d["metadata"]
    workloads = list(by_kind.get("Deployment", {}).values()) + list(
        by_kind.get("StatefulSet", {}).values())
    problems = []

    def need(cond, msg):
        if not cond:
            problems.append(msg)

    # Each workload's selector picks its own pods, and no other workload's.
    for w in workloads:
        sel = w["spec"]["selector"]["matchLabels"]
        need(matches(sel, pod_template(w)["metadata"]["labels"]),
             f"{w['kind']} {w['metadata']['name']}: selector {sel} misses its pods")
        for other in workloads:
            if other is not w:
                need(not matches(sel, pod_template(other)["metadata"]["labels"]),
                     f"{w['metadata']['name']}'s selector also picks {other['metadata']['name']}")

    def pods_of(selector):
        return [w for w in workloads if matches(selector, pod_template(w)["metadata"]["labels"])]

    # Services select exactly one workload, and their target ports are named container ports.
    for s in by_kind.get("Service", {}).values():
        picked = pods_of(s["spec"]["selector"])
        need(len(picked) == 1, f"Service {s['metadata']['name']} selects {len(picked)} workloads")
        for w in picked:
            names = {p["name"]: p["containerPort"] for c in w["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            for port in s["spec"]["ports"]:
                need(port["targetPort"] in names,
                     f"Service {s['metadata']['name']} targetPort {port['targetPort']} not a port "
                     f"of {w['metadata']['name']}")
    # Probes name ports the container has.
    for w in workloads:
        for c in w["spec"]["template"]["spec"]["containers"]:
            names = {p["name"] for p in c.get("ports", [])}
            numbers = {p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                p = c.get(probe)
                if not p:
                    continue
                for kind in ("httpGet", "tcpSocket", "grpc"):
                    if kind in p:
                        port = p[kind]["port"]
                        need(port in names or port in numbers,
                             f"{w['metadata']['name']}/{c['name']} {probe} port {port} unknown")
    # PDBs and HPAs point at real workloads.
    for pdb in by_kind.get("PodDisruptionBudget", {}).values():
        need(len(pods_of(pdb["spec"]["selector"]["matchLabels"])) == 1,
             f"PDB {pdb['metadata']['name']} does not select exactly one workload")
    for hpa in by_kind.get("HorizontalPodAutoscaler", {}).values():
        ref = hpa["spec"]["scaleTargetRef"]
        target = by_kind.get(ref["kind"], {}).get(ref["name"])
        need(target is not None, f"HPA {hpa['metadata']['name']} targets missing {ref}")
        if target is not None:
            need("replicas" not in target["spec"],
                 f"{ref['name']} sets replicas although an HPA scales it")
    # Ingress backends and ServiceMonitor endpoints are Services with those ports.
    for ing in by_kind.get("Ingress", {}).values():
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                svc = path["backend"]["service"]
                s = by_kind["Service"].get(svc["name"])
                need(s is not None and svc["port"]["name"] in [p["name"] for p in s["spec"]["ports"]],
                     f"Ingress backend {svc} is no Service port")
    for sm in by_kind.get("ServiceMonitor", {}).values():
        picked = [s for s in by_kind["Service"].values()
                  if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        need(picked, f"ServiceMonitor {sm['metadata']['name']} selects no Service")
        for s in picked:
            for ep in sm["spec"]["endpoints"]:
                need(ep["port"] in [p["name"] for p in s["spec"]["ports"]],
                     f"ServiceMonitor {sm['metadata']['name']}: {s['metadata']['name']} has no "
                     f"port {ep['port']}")
        for label in sm["spec"].get("targetLabels", []):
            for s in picked:
                need(label in s["metadata"]["labels"], f"{s['metadata']['name']} lacks {label}")

    # ConfigMaps and Secrets referenced exist (rendered) or are named in the values as existing.
    wc = values.get("workerChannel", {})
    external = {values.get("apiKeys", {}).get("existingSecret"),
                values.get("redis", {}).get("external", {}).get("existingSecret"),
                wc.get("mtls", {}).get("workerSecret"), wc.get("mtls", {}).get("routerSecret"),
                wc.get("sharedSecret", {}).get("existingSecret")} - {None, ""}
    for u in values.get("upstreams") or []:
        external |= {(u.get(k) or {}).get("name") for k in ("apiKeySecret", "caSecret")} - {None, ""}
    rendered_secrets = by_kind.get("Secret", {})
    configmaps = by_kind.get("ConfigMap", {})

    def secret_key_ok(name, key):
        if name in rendered_secrets:
            s = rendered_secrets[name]
            return key in (s.get("stringData") or {}) or key in (s.get("data") or {})
        return name in external

    for w in workloads:
        spec = w["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        claim_templates = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for v in vols.values():
            if "configMap" in v:
                need(v["configMap"]["name"] in configmaps, f"missing ConfigMap {v['configMap']}")
            if "secret" in v:
                name = v["secret"]["secretName"]
                need(name in rendered_secrets or name in external, f"unknown Secret {name}")
                for item in v["secret"].get("items", []):
                    need(secret_key_ok(name, item["key"]), f"Secret {name} has no key {item['key']}")
            for source in (v.get("projected") or {}).get("sources", []):
                if "secret" in source:
                    name = source["secret"]["name"]
                    need(name in rendered_secrets or name in external, f"unknown Secret {name}")
        for c in containers(w):
            for m in c.get("volumeMounts", []):
                need(m["name"] in vols or m["name"] in claim_templates,
                     f"{w['metadata']['name']}/{c['name']} mounts unknown volume {m['name']}")
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    need(secret_key_ok(ref["name"], ref["key"]),
                         f"env {e['name']}: Secret {ref['name']} key {ref['key']} unknown")
            # $(VAR) in args must be defined in the container's env, or Kubernetes passes it as is.
            env_names = {e["name"] for e in c.get("env", [])}
            for a in c.get("args", []):
                for var in re.findall(r"\$\(([A-Z_]+)\)", str(a)):
                    need(var in env_names, f"{c['name']}: $({var}) in args but not in env")

    # The router's workers are exactly the worker pools' headless Services, with their gRPC ports,
    # and each worker listens on its Service's target port.
    router_cm = [c for c in configmaps.values()
                 if c["metadata"]["labels"].get("app.kubernetes.io/component") == "router"]
    need(len(router_cm) == 1, "one router ConfigMap")
    worker_services = {s["metadata"]["name"]: s for s in by_kind["Service"].values()
                       if s["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"}
    if router_cm:
        cfg = yaml.safe_load(router_cm[0]["data"]["router.yaml"])
        listed = set()
        for w in cfg["workers"]:
            m = re.fullmatch(r"dns:///([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)", w)
            need(m is not None, f"router worker {w} is not a Service DNS name")
            if not m:
                continue
            name, ns, port = m.group(1), m.group(2), int(m.group(3))
            listed.add(name)
            s = worker_services.get(name)
            need(ns == NAMESPACE, f"{w}: namespace {ns}")
            need(s is not None and s["spec"].get("clusterIP") == "None",
                 f"{w}: no headless Service {name}")
            if s is not None:
                grpc = [p for p in s["spec"]["ports"] if p["port"] == port]
                need(len(grpc) == 1 and grpc[0]["name"] == "grpc", f"{w}: Service has no grpc port {port}")
                dep = pods_of(s["spec"]["selector"])[0]
                c = dep["spec"]["template"]["spec"]["containers"][0]
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                args = c["args"]
                listen = args[args.index("--listen") + 1]
                need(listen == f"0.0.0.0:{ports['grpc']}", f"{name}: --listen {listen}")
                metrics = args[args.index("--metrics-port") + 1]
                need(int(metrics) == ports["metrics"], f"{name}: --metrics-port {metrics}")
        need(listed == set(worker_services), f"router lists {listed}, pools are {set(worker_services)}")
        # The router mounts the ConfigMap it is configured from, and the keys file it names.
        router = [w for w in workloads
                  if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "router"][0]
        rc = router["spec"]["template"]["spec"]["containers"][0]
        mounts = {m["mountPath"]: m["name"] for m in rc["volumeMounts"]}
        config_arg = rc["args"][rc["args"].index("--config") + 1]
        vols = {v["name"]: v for v in router["spec"]["template"]["spec"]["volumes"]}
        need(vols[mounts[os.path.dirname(config_arg)]]["configMap"]["name"] == router_cm[0]["metadata"]["name"],
             "the router's --config is not its ConfigMap")
        keys_vol = vols[mounts[os.path.dirname(cfg["api_keys_file"])]]
        need([i["path"] for i in keys_vol["secret"]["items"]] == [os.path.basename(cfg["api_keys_file"])],
             "api_keys_file is not the mounted Secret's file")
        channel = cfg.get("worker_channel", {})
        for key in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
            if key in channel:
                need(os.path.dirname(channel[key]) in mounts, f"{key} {channel[key]} not mounted")
        if "secret_env" in channel:
            need(channel["secret_env"] in {e["name"] for e in rc.get("env", [])},
                 "secret_env not in the router's env")
    # The dashboards ConfigMap carries deploy/grafana's files as they are (through the chart's
    # dashboards/ link), when enabled and present.
    dashboards = sorted((CHART / "dashboards").glob("*.json")) if (CHART / "dashboards").is_dir() else []
    boards = [c for c in configmaps.values() if c["metadata"]["name"].endswith("-dashboards")]
    if values.get("monitoring", {}).get("dashboards", {}).get("enabled") and dashboards:
        need(len(boards) == 1, "no dashboards ConfigMap although dashboards are enabled")
        if boards:
            data = boards[0]["data"]
            need(sorted(data) == [f.name for f in dashboards],
                 f"dashboards ConfigMap holds {sorted(data)}, deploy/grafana has {[f.name for f in dashboards]}")
            for f in dashboards:
                if f.name in data:
                    need(json.loads(data[f.name]) == json.loads(f.read_text()), f"{f.name} differs")
            need(boards[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
                 "dashboards ConfigMap lacks the grafana_dashboard label")
    else:
        need(not boards, "dashboards ConfigMap rendered although disabled or no files")
    if problems:
        fail("\n  ".join(["cross-references:"] + problems))
    print(f"cross-references: {len(docs)} objects line up")


def cmd_render(values_path):
    values = load_values(values_path)
    docs = render(values)
    kinds = sorted({d["kind"] for d in docs})
    print(f"rendered {len(docs)} objects: {', '.join(kinds)}")
    with tempfile.TemporaryDirectory() as tmp:
        core = [d for d in docs if d["apiVersion"] != "monitoring.coreos.com/v1"]
        monitors = [d for d in docs if d["apiVersion"] == "monitoring.coreos.com/v1"]
        core_file = pathlib.Path(tmp, "core.yaml")
        core_file.write_text(yaml.safe_dump_all(core))
        for version in ("1.30.0", None):  # the oldest the chart is tested on, and the newest
            cmd = [str(BIN / "kubernetes-validate"), "--strict", "--quiet"]
            if version:
                cmd += ["-k", version]
            r = subprocess.run(cmd + [str(core_file)], capture_output=True, text=True)
            print(r.stdout + r.stderr)
            if r.returncode != 0 or "ERROR" in r.stdout:
                fail(f"kubernetes-validate {' '.join(cmd[1:])}")
        if values.get("monitoring", {}).get("serviceMonitor", {}).get("enabled"):
            if not monitors:
                fail("serviceMonitor.enabled but no ServiceMonitor rendered")
            schema = pathlib.Path(tmp, "servicemonitor.schema.json")
            schema.write_text(json.dumps(service_monitor_schema()))
            files = []
            for i, m in enumerate(monitors):
                f = pathlib.Path(tmp, f"servicemonitor-{i}.yaml")
                f.write_text(yaml.safe_dump(m))
                files.append(str(f))
            r = subprocess.run([str(BIN / "check-jsonschema"), "--schemafile", str(schema)] + files,
                               capture_output=True, text=True)
            print(r.stdout + r.stderr)
            if r.returncode != 0:
                fail("check-jsonschema on the ServiceMonitors")
            # The check can fail: a field the CRD does not have is refused.
            bad = dict(monitors[0], spec=dict(monitors[0]["spec"], scrapeEvery="15s"))
            pathlib.Path(files[0]).write_text(yaml.safe_dump(bad))
            r = subprocess.run([str(BIN / "check-jsonschema"), "--schemafile", str(schema), files[0]],
                               capture_output=True, text=True)
            if r.returncode == 0:
                fail("the ServiceMonitor schema accepted an unknown field")
        elif monitors:
            fail("ServiceMonitor rendered although disabled")
    check_refs(docs, values)


def wait_for_line(proc, needle, timeout):
    """Reads proc.stderr until a line holds `needle`, the stream ends or `timeout` seconds pass
    (then the child is killed); returns (the lines read, whether the needle came). A reader
    thread, so that a child that neither prints nor exits cannot hang the check."""
    lines, found = [], threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if needle in line:
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        proc.kill()
        reader.join(30)
    return list(lines), found.is_set()


def run_until_listening(cmd, env, what, start_timeout):
    """Starts `cmd`, waits (at most start_timeout s) for its 'listening on' line, then stops it
    with SIGTERM (60 s to exit); prints its log and fails unless it listened and exited 0."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    lines, listening = wait_for_line(proc, "listening on", start_timeout)
    rest = ""
    if listening:
        proc.send_signal(signal.SIGTERM)
        try:
            _, rest = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, rest = proc.communicate()
            print("".join(lines) + rest)
            fail(f"{what} did not exit within 60 s of SIGTERM")
    else:
        proc.wait(timeout=30)  # it ended, or wait_for_line killed it
    log = "".join(lines) + rest
    print(log)
    if not listening:
        fail(f"{what} did not start: no 'listening on' within {start_timeout} s "
             f"(exit {proc.returncode})")
    if proc.returncode != 0:
        fail(f"{what} exited {proc.returncode}")
    return log


def cmd_router_config(values_path, router_bin):
    """The real router parses and validates the rendered config and starts listening."""
    docs = render(load_values(values_path))
    cm = [d for d in docs if d["kind"] == "ConfigMap"
          and d["metadata"]["labels"].get("app.kubernetes.io/component") == "router"][0]
    text = cm["data"]["router.yaml"]
    with tempfile.TemporaryDirectory() as tmp:
        # The files the pod mounts, made here: the keys file from the rendered Secret (or a
        # stand-in for an existing one), certificates made with openssl.
        secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
        keys = pathlib.Path(tmp, "keys", "api_keys")
        keys.parent.mkdir()
        rendered = [s for s in secrets.values() if "api" in s["metadata"]["name"]]
        keys.write_text(next(iter(rendered[0]["stringData"].values())) if rendered else
                        "stand-in 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n")
        text = text.replace("/etc/deltaserve/keys/", f"{tmp}/keys/")
        if "/etc/deltaserve/tls/" in text:
            tls = pathlib.Path(tmp, "tls")
            tls.mkdir()
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(tls / "tls.key"),
                            "-out", str(tls / "tls.crt"), "-days", "1", "-subj", "/CN=test"],
                           check=True, capture_output=True, timeout=60)
            shutil.copy(tls / "tls.crt", tls / "ca.crt")
            text = text.replace("/etc/deltaserve/tls/", f"{tmp}/tls/")
        if "/etc/deltaserve/upstreams/" in text:
            # Upstream keys (and CAs) come from Secrets: stand-ins in the same places.
            for u in yaml.safe_load(text).get("upstreams", []):
                folder = pathlib.Path(tmp, "upstreams", u["name"])
                folder.mkdir(parents=True)
                (folder / "api_key").write_text("sk-stand-in-0123456789abcdef\n")
                if "tls_ca_file" in u:
                    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                                    str(folder / "ca.key"), "-out", str(folder / "ca.crt"),
                                    "-days", "1", "-subj", "/CN=test-ca"],
                                   check=True, capture_output=True, timeout=60)
            text = text.replace("/etc/deltaserve/upstreams/", f"{tmp}/upstreams/")
        config = pathlib.Path(tmp, "router.yaml")
        config.write_text(text)
        env = dict(os.environ, DELTASERVE_WORKER_SECRET="0123456789abcdef0123456789abcdef")
        log = run_until_listening([router_bin, "--config", str(config), "--listen", "127.0.0.1:0"],
                                  env, "the router with the rendered config", 120)
        n_workers = len(yaml.safe_load(cm["data"]["router.yaml"])["workers"])
        if f"{n_workers} worker(s)" not in log and "dns:///" not in log:
            fail("the router did not take the pools' dns:/// workers")


def pod_env(dep, c):
    """The container's environment as the pod would have it: its values, POD_NAME from the
    Downward API, stand-ins for what comes from Secrets."""
    env = dict(os.environ)
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
    env["POD_NAME"] = dep["metadata"]["name"] + "-0"
    env.setdefault("REDIS_URL", "redis://127.0.0.1:1")  # from a Secret in the cluster
    if any(e["name"] == "DELTASERVE_WORKER_SECRET" for e in c.get("env", [])):
        env["DELTASERVE_WORKER_SECRET"] = "0123456789abcdef0123456789abcdef"
    return env


def expand(args, env):
    """$(VAR) in args, as the kubelet substitutes it from the container's env."""
    return [re.sub(r"\$\(([A-Z_]+)\)", lambda m: env[m.group(1)], a) for a in args]


def cmd_worker_args(values_path, worker_bin, model):
    """Each pool's rendered worker command line, exactly as the pod runs it, passes the real
    deltaserve-worker's own checks (--check-args: every flag, size and rule between flags, no file
    read, no device opened), GPU pools included; and each CPU pool's command line starts the real
    worker on the tiny golden model (its ports chosen by the kernel, TLS files made here)."""
    docs = render(load_values(values_path))
    workers = [d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"]
    checked = started = 0
    for dep in workers:
        name = dep["metadata"]["name"]
        c = dep["spec"]["template"]["spec"]["containers"][0]
        env = pod_env(dep, c)
        args = expand(c["args"], env)
        print(f"$ deltaserve-worker {' '.join(args)} --check-args")
        try:
            r = subprocess.run([worker_bin] + args + ["--check-args"], capture_output=True,
                               text=True, env=env, timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"{name}: deltaserve-worker --check-args did not answer within 60 s")
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            fail(f"{name}: the worker refuses the chart's command line (exit {r.returncode}): "
                 f"{r.stderr.splitlines()[0] if r.stderr else ''}")
        checked += 1
        if args[args.index("--device") + 1] != "cpu":
            continue  # a GPU pool: checked above; starting it needs a GPU
        with tempfile.TemporaryDirectory() as tmp:
            if "--tls-cert" in args:
                subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                                f"{tmp}/tls.key", "-out", f"{tmp}/tls.crt", "-days", "1",
                                "-subj", "/CN=test"], check=True, capture_output=True, timeout=60)
                shutil.copy(f"{tmp}/tls.crt", f"{tmp}/ca.crt")
            # Started here: the files the pod mounts are made in tmp, the model is the tiny one
            # and the ports are the kernel's.
            cmd = []
            for a in args:
                a = a.replace("/etc/deltaserve/tls/", f"{tmp}/")
                if a.startswith("0.0.0.0:"):
                    a = "127.0.0.1:0"
                cmd.append(a)
            cmd[cmd.index("--model") + 1] = cmd[cmd.index("--model") + 1].split("=")[0] + "=" + model
            cmd[cmd.index("--metrics-port") + 1] = "0"
            print("$ deltaserve-worker " + " ".join(cmd))
            run_until_listening([worker_bin] + cmd, env,
                                f"{name}: the worker with the chart's flags", 300)
            started += 1
    print(f"{checked} pool(s) checked with the chart's flags, {started} CPU pool(s) started")
    if checked == 0 or checked != len(workers):
        fail(f"{checked} of {len(workers)} pool(s) checked: the values render no worker pool")
    if started == 0:
        fail("no CPU pool started: the values should have one, so that a real start is tested")


def cmd_schema_rejects():
    base = load_values(CHART / "ci" / "default-values.yaml")
    pool = {"name": "p", "model": {"name": "m", "file": "m.gguf", "source": {"pvc": {"claimName": "c"}}}}
    cases = [
        ("workerPools/0/device", {"workerPools": [dict(pool, device="tpu")]}),
        ("workerPools/0/model/source", {"workerPools": [dict(pool, model=dict(pool["model"], source={
            "pvc": {"claimName": "c"}, "hostPath": {"path": "/m"}}))]}),
        ("workerPools/0/name", {"workerPools": [dict(pool, name="Bad_Name")]}),
        ("workerPools/0/cacheTypeK", {"workerPools": [dict(pool, cacheTypeK="f8")]}),
        ("workerPools/0/redisUrl", {"workerPools": [dict(pool, redisUrl="redis://u:pw@r:6379")]}),
        # The worker takes --ram only on the CPU and --vram only on a GPU.
        ("workerPools[p].ram", {"workerPools": [dict(pool, device="gpu", ram="12GiB")]}),
        ("workerPools[p].vram", {"workerPools": [dict(pool, vram="12GiB")]}),
        ("workerPools/0/vram", {"workerPools": [dict(pool, device="gpu", vram="lots")]}),
        ("apiKeys/keys/0/sha256", {"apiKeys": {"keys": [{"name": "a", "sha256": "beef"}]}}),
        ("router/configReload", {"router": {"configReload": "inotify"}}),
        ("config/routing", {"config": {"routing": {"dns_interval_ms": 5}}}),
        ("workerChannel/mtls", {"workerChannel": {"mtls": {"enabled": True}}}),
        ("unknownTopLevel", {"unknownTopLevel": 1}),
        ("a router without API keys", {"apiKeys": {"keys": []}}),
    ]
    for where, override in cases:
        values = json.loads(json.dumps(base))
        for k, v in override.items():
            values[k] = v if not isinstance(v, dict) or k not in values else {**values[k], **v}
        try:
            render(values)
        except helm.HelmError as e:
            msg = str(e)
            key = where.split("/")[-1] if "/" in where else where
            if key not in msg:
                fail(f"{where}: refused, but the message does not name it: {msg}")
            print(f"refused as expected ({where}): {msg.splitlines()[0][:160]}")
            continue
        fail(f"{where}: bad values rendered")
    # And the good example values pass the schema (validate_schema raises HelmValuesError), a
    # bad variant of each does not (so the call can fail).
    chart = helm.Chart.load(str(CHART))
    files = sorted((CHART / "ci").glob("*-values.yaml"))
    if not files:
        fail("no ci/*-values.yaml")
    for f in files:
        values = load_values(f)
        try:
            chart.validate_schema(chart.merge_values(values))
        except helm.HelmError as e:
            fail(f"{f.name} does not pass values.schema.json: {e}")
        try:
            chart.validate_schema(chart.merge_values(dict(values, unknownTopLevel=1)))
        except helm.HelmError:
            print(f"values.schema.json: {f.name} passes, with an unknown key it does not")
            continue
        fail(f"values.schema.json accepted {f.name} with an unknown top-level key")


def main(argv):
    if len(argv) < 2:
        fail(__doc__)
    cmd = argv[1]
    if cmd == "lint":
        cmd_lint()
    elif cmd == "render" and len(argv) == 3:
        cmd_render(argv[2])
    elif cmd == "router-config" and len(argv) == 4:
        cmd_router_config(argv[2], argv[3])
    elif cmd == "worker-args" and len(argv) == 5:
        cmd_worker_args(argv[2], argv[3], argv[4])
    elif cmd == "schema-rejects":
        cmd_schema_rejects()
    else:
        fail(__doc__)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv)
