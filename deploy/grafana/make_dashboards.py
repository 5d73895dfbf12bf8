#!/usr/bin/env python3
"""Writes the Grafana dashboards of DeltaServe (deltaserve-overview.json, deltaserve-worker.json)
next to this script. The JSON files are what Grafana and the Helm chart load; this script is how
they are kept consistent: edit it, run it, commit both. docs/metrics.md explains every panel.

Conventions (checked by tests/monitoring): the datasource is the template variable
${datasource}; every rate()/increase() uses Grafana's $__rate_interval; instances and models are
chosen with template variables ($instance, $model), never written into a query."""
import json
import os

RI = "$__rate_interval"
M = 'model=~"$model"'
I = 'instance=~"$instance"'
DS = {"type": "prometheus", "uid": "${datasource}"}


def quantiles(metric, sel, by="model"):
    return [(f"p{int(q * 100)} {{{{{by}}}}}",
             f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[{RI}])))")
            for q in (0.5, 0.9, 0.99)]


class Board:
    def __init__(self, uid, title, description, variables):
        self.uid, self.title, self.description = uid, title, description
        self.variables = variables
        self.panels = []
        self.y = 0
        self.x = 0

    def row(self, title):
        if self.x:
            self.x, self.y = 0, self.y + 8
        self.panels.append({"type": "row", "title": title, "collapsed": False,
                            "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def panel(self, title, description, targets, unit="short", kind="timeseries", width=8,
              extra=None):
        if self.x + width > 24:
            self.x, self.y = 0, self.y + 8
        p = {
            "type": kind,
            "title": title,
            "description": description,
            "id": len(self.panels) + 1,
            "datasource": DS,
            "gridPos": {"h": 8, "w": width, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                         "legendFormat": legend} for i, (legend, expr) in enumerate(targets)],
        }
        if extra:
            p.update(extra)
        self.panels.append(p)
        self.x += width

    def json(self):
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["deltaserve"],
            "editable": True,
            "schemaVersion": 39,
            "version": 1,
            "time": {"from": "now-1h", "to": "now"},
            "refresh": "30s",
            "timezone": "",
            "graphTooltip": 1,
            "annotations": {"list": []},
            "links": [],
            "templating": {"list": self.variables},
            "panels": self.panels,
        }


def datasource_var():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
            "options": []}


def query_var(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-values"}, "definition": query,
            "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "hide": 0, "sort": 1, "options": [], "regex": ""}


def overview():
    b = Board("deltaserve-overview", "DeltaServe / Overview",
              "Requests, latency, tokens, load and caches of a DeltaServe deployment: the router's "
              "view of every request and the workers' load (docs/metrics.md).",
              [datasource_var(),
               query_var("model", "Model", "label_values(deltaserve_model_running_sequences, model)"),
               query_var("upstream", "Upstream",
                         "label_values(deltaserve_router_upstream_requests_total, upstream)")])
    b.row("Traffic")
    b.panel("Requests per second", "Generation requests by model (router).",
            [("{{model}}", f"sum by (model) (rate(deltaserve_router_requests_total{{{M}}}[{RI}]))")],
            unit="reqps")
    b.panel("Error rate", "Share of generation requests that did not end 2xx (4xx: the client's "
            "fault or a limit; 5xx: no worker could answer), by status class.",
            [("{{class}}", "sum by (class) (label_replace(rate(deltaserve_router_requests_total{"
              f'{M},code!~"2.."}}[{RI}]), "class", "$1xx", "code", "(.).*")) / scalar(sum('
              f"rate(deltaserve_router_requests_total{{{M}}}[{RI}])))")],
            unit="percentunit")
    b.panel("Refusals, retries and fallbacks", "Requests the router refused before any worker "
            "answered (by reason), API-key rate-limit refusals, retries on another worker and "
            "fallbacks to a later model of an alias chain.",
            [("refused {{reason}}", f"sum by (reason) (rate(deltaserve_router_rejections_total[{RI}]))"),
             ("rate limited", f"sum(rate(deltaserve_router_rate_limited_total[{RI}]))"),
             ("retries", f"sum(rate(deltaserve_router_retries_total[{RI}]))"),
             ("fallbacks", f"sum(rate(deltaserve_router_fallbacks_total[{RI}]))")],
            unit="reqps")
    b.row("Latency")
    b.panel("Time to first token", "p50 / p90 / p99 from the request to its first token.",
            quantiles("deltaserve_router_time_to_first_token_seconds", M), unit="s")
    b.panel("Inter-token latency", "p50 / p90 / p99 gap between streamed tokens.",
            quantiles("deltaserve_router_inter_token_latency_seconds", M), unit="s")
    b.panel("End-to-end latency", "p50 / p90 / p99 from the request to its last token or error.",
            quantiles("deltaserve_router_e2e_request_latency_seconds", M), unit="s")
    b.row("Tokens and load")
    b.panel("Tokens per second", "Prompt and generated tokens of finished requests (router), and "
            "what the engines computed (workers: prefill excludes cached prompt tokens).",
            [("prompt {{model}}", f"sum by (model) (rate(deltaserve_router_prompt_tokens_total{{{M}}}[{RI}]))"),
             ("generated {{model}}", f"sum by (model) (rate(deltaserve_router_completion_tokens_total{{{M}}}[{RI}]))"),
             ("engine prefill {{model}}", f"sum by (model) (rate(deltaserve_model_prefill_tokens_total{{{M}}}[{RI}]))"),
             ("engine decode {{model}}", f"sum by (model) (rate(deltaserve_model_decode_tokens_total{{{M}}}[{RI}]))")],
            unit="short")
    b.panel("Running and waiting", "Sequences running and requests queued, summed over workers.",
            [("running {{model}}", f"sum by (model) (deltaserve_model_running_sequences{{{M}}})"),
             ("waiting {{model}}", f"sum by (model) (deltaserve_model_waiting_sequences{{{M}}})")])
    b.panel("KV cache and state slots in use", "KV pages and recurrent-state slots in use over "
            "what the workers have, per model.",
            [("KV {{model}}", f"sum by (model) (deltaserve_model_kv_pages_used{{{M}}}) / "
              f"sum by (model) (deltaserve_model_kv_pages{{{M}}})"),
             ("slots {{model}}", f"sum by (model) (deltaserve_model_state_slots_used{{{M}}}) / "
              f"sum by (model) (deltaserve_model_state_slots{{{M}}})")],
            unit="percentunit", extra={"fieldConfig": {"defaults": {"unit": "percentunit", "min": 0, "max": 1}, "overrides": []}})
    b.row("Caches and workers")
    b.panel("Prefix routing and snapshot hit rate", "Share of worker choices that went to the "
            "worker holding the prompt's longest snapshot (router), and share of snapshot lookups "
            "that restored a prefix, by tier (workers).",
            [("prefix routing hit", f'sum(rate(deltaserve_router_prefix_routing_total{{outcome="hit"}}[{RI}])) / '
              f"sum(rate(deltaserve_router_prefix_routing_total[{RI}]))"),
             ("snapshot hit {{tier}}", f"sum by (tier) (rate(deltaserve_model_snapshot_hits_total{{{M}}}[{RI}])) / "
              f"scalar(sum(rate(deltaserve_model_snapshot_lookups_total{{{M}}}[{RI}])))")],
            unit="percentunit")
    b.panel("Per-worker load", "Running plus waiting sequences each worker last reported to the "
            "router, and the Generate calls the router started on it.",
            [("load {{worker}}", f"sum by (worker) (deltaserve_router_model_running_sequences{{{M}}} + "
              f"deltaserve_router_model_waiting_sequences{{{M}}})"),
             ("calls/s {{worker}}", f"sum by (worker) (rate(deltaserve_router_worker_calls_total[{RI}]))")])
    b.panel("Workers up and circuit breakers", "1 when the router's last health poll of the worker "
            "succeeded; circuit state 0 closed, 1 open, 2 half-open.",
            [("up {{worker}}", "max by (worker) (deltaserve_router_worker_up)"),
             ("circuit {{worker}}", "max by (worker) (deltaserve_router_worker_circuit_open)")])
    b.row("Upstreams")
    U = 'upstream=~"$upstream"'
    b.panel("Upstream requests and errors", "Requests the router sent to upstream models "
            "(docs/upstreams.md) by how they ended, and their failures by kind (connect, timeout, "
            "rate_limited, server, auth, ...): each failure before the first byte was retried or "
            "fell back.",
            [("{{outcome}} {{upstream}}", f"sum by (upstream, outcome) (rate(deltaserve_router_upstream_requests_total{{{U}}}[{RI}]))"),
             ("{{kind}} {{upstream}}", f"sum by (upstream, kind) (rate(deltaserve_router_upstream_errors_total{{{U}}}[{RI}]))")],
            unit="reqps")
    b.panel("Upstream time to first output", "p50 / p90 / p99 from sending a request to an "
            "upstream to its first output.",
            quantiles("deltaserve_router_upstream_ttft_seconds", U, by="upstream"), unit="s")
    b.panel("Upstream tokens, in flight and circuits", "Prompt and completion tokens the "
            "upstreams reported, requests in flight to each, and 1 while its circuit is open.",
            [("{{type}} tokens/s {{upstream}}", f"sum by (upstream, type) (rate(deltaserve_router_upstream_tokens_total{{{U}}}[{RI}]))"),
             ("in flight {{upstream}}", f"sum by (upstream) (deltaserve_router_upstream_in_flight{{{U}}})"),
             ("circuit open {{upstream}}", f"max by (upstream) (deltaserve_router_upstream_circuit_open{{{U}}})")])
    b.panel("Upstream connections", "Connections upstream requests used per second: opened for "
            "the request (new: TCP and TLS handshakes) or kept from an earlier one (reused; "
            "docs/upstreams.md, connection reuse).",
            [("{{kind}} {{upstream}}", f"sum by (upstream, kind) (rate(deltaserve_router_upstream_connections_total{{{U}}}[{RI}]))")],
            unit="ops")
    return b


def worker():
    b = Board("deltaserve-worker", "DeltaServe / Worker and engine",
              "One or more workers: the engine's throughput and batches, memory, session "
              "snapshots (RAM and Redis), speculation and MoE expert routing (docs/metrics.md).",
              [datasource_var(),
               query_var("instance", "Worker", "label_values(deltaserve_worker_requests_total, instance)"),
               query_var("model", "Model", "label_values(deltaserve_model_running_sequences, model)")])
    S = f"{I},{M}"
    b.row("Engine")
    b.panel("Prefill and decode tokens per second", "Tokens the forward passes ran: prompt "
            "chunks (prefill) and generating sequences (decode, drafts included).",
            [("prefill {{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_prefill_tokens_total{{{S}}}[{RI}]))"),
             ("decode {{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_decode_tokens_total{{{S}}}[{RI}]))")])
    b.panel("Batch size", "p50 / p90 sequences and tokens per forward pass.",
            [("sequences p50", f"histogram_quantile(0.5, sum by (le) (rate(deltaserve_model_batch_size_sequences_bucket{{{S}}}[{RI}])))"),
             ("sequences p90", f"histogram_quantile(0.9, sum by (le) (rate(deltaserve_model_batch_size_sequences_bucket{{{S}}}[{RI}])))"),
             ("tokens p50", f"histogram_quantile(0.5, sum by (le) (rate(deltaserve_model_batch_size_tokens_bucket{{{S}}}[{RI}])))"),
             ("tokens p90", f"histogram_quantile(0.9, sum by (le) (rate(deltaserve_model_batch_size_tokens_bucket{{{S}}}[{RI}])))")])
    b.panel("Requests", "Generate calls received, failed and cancelled per second.",
            [("received {{instance}}", f"sum by (instance) (rate(deltaserve_worker_requests_total{{{I}}}[{RI}]))"),
             ("failed {{instance}}", f"sum by (instance) (rate(deltaserve_worker_requests_failed_total{{{I}}}[{RI}]))"),
             ("cancelled {{instance}}", f"sum by (instance) (rate(deltaserve_worker_requests_cancelled_total{{{I}}}[{RI}]))")],
            unit="reqps")
    b.row("Memory")
    b.panel("Running and waiting", "Sequences running and requests queued.",
            [("running {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_running_sequences{{{S}}})"),
             ("waiting {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_waiting_sequences{{{S}}})")])
    b.panel("KV pages", "KV cache pages in use and in all (pages held only by RAM snapshots "
            "count as free).",
            [("used {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_kv_pages_used{{{S}}})"),
             ("total {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_kv_pages{{{S}}})")])
    b.panel("Recurrent-state slots", "DeltaNet state slots in use and in all.",
            [("used {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_state_slots_used{{{S}}})"),
             ("total {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_state_slots{{{S}}})")])
    b.panel("Preemptions", "Sequences preempted for KV pages per second (the degraded mode of a "
            "full cache: they recompute).",
            [("{{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_preemptions_total{{{S}}}[{RI}]))")])
    b.panel("Model load progress", "Fraction of each model's weights read at start-up.",
            [("{{instance}} {{model}}", f"max by (instance, model) (deltaserve_worker_model_load_progress{{{S}}})")],
            unit="percentunit")
    b.row("Session snapshots")
    b.panel("Snapshot lookups", "Lookups per second that restored a prefix, by tier, and that "
            "found none.",
            [("hit {{tier}}", f"sum by (tier) (rate(deltaserve_model_snapshot_hits_total{{{S}}}[{RI}]))"),
             ("miss", f"sum(rate(deltaserve_model_snapshot_misses_total{{{S}}}[{RI}]))")],
            unit="reqps")
    b.panel("Snapshot bytes", "RAM held by snapshots, and bytes per second read from and written "
            "to Redis.",
            [("RAM {{instance}}", f"sum by (instance) (deltaserve_model_snapshot_ram_bytes{{{S}}})"),
             ("Redis read/s", f"sum(rate(deltaserve_model_snapshot_redis_fetched_bytes_total{{{S}}}[{RI}]))"),
             ("Redis written/s", f"sum(rate(deltaserve_model_snapshot_redis_written_bytes_total{{{S}}}[{RI}]))")],
            unit="bytes")
    b.panel("Snapshot captures", "Snapshots taken per second, and of them those taken inside a "
            "prompt chunk from a state tap (the chunk ran on past the message boundary).",
            [("all", f"sum(rate(deltaserve_model_snapshot_captures_total{{{S}}}[{RI}]))"),
             ("inside a chunk", f"sum(rate(deltaserve_model_snapshot_tapped_captures_total{{{S}}}[{RI}]))")],
            unit="ops")
    b.panel("Redis errors", "Redis calls that failed or timed out per second, by operation (the "
            "request ran without Redis).",
            [("{{op}}", f"sum by (op) (rate(deltaserve_model_snapshot_redis_errors_total{{{S}}}[{RI}]))")])
    b.row("Speculation and experts")
    b.panel("Speculation", "n-gram drafted and accepted tokens per second.",
            [("drafted", f"sum(rate(deltaserve_model_drafted_tokens_total{{{S}}}[{RI}]))"),
             ("accepted", f"sum(rate(deltaserve_model_accepted_tokens_total{{{S}}}[{RI}]))")])
    b.panel("MoE expert routing", "Tokens per second each expert of each layer receives (MoE "
            "models): the hot experts are the ones to place on the GPU.",
            [("layer {{layer}} expert {{expert}}", f"sum by (layer, expert) (rate(deltaserve_model_expert_routed_tokens_total{{{S}}}[{RI}]))")],
            kind="heatmap", width=16)
    b.row("Expert placement")
    b.panel("Routed experts served from VRAM", "Share of routed (token, expert) pairs computed by "
            "an expert in device memory (MoE models with expert tiers; docs/moe_placement.md). "
            "Rises as the router's placement follows the traffic; 0 on a CPU worker, 1 when "
            "--expert-vram holds every expert.",
            [("{{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_expert_routed_device_total{{{S}}}[{RI}])) / sum by (instance, model) (rate(deltaserve_model_expert_routed_total{{{S}}}[{RI}]))")],
            unit="percentunit")
    b.panel("Expert moves", "Experts moved into device memory and evicted per second, and moves "
            "still pending (a placement being applied).",
            [("in {{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_expert_moves_total{{{S},direction=\"in\"}}[{RI}]))"),
             ("out {{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_expert_moves_total{{{S},direction=\"out\"}}[{RI}]))"),
             ("pending {{instance}} {{model}}", f"sum by (instance, model) (deltaserve_model_expert_moves_pending{{{S}}})")])
    b.panel("Expert bytes copied to the device", "PCIe traffic the placement costs (expert weights "
            "copied into device slots per second); failed migration steps should stay at 0.",
            [("copied {{instance}} {{model}}", f"sum by (instance, model) (rate(deltaserve_model_expert_moved_bytes_total{{{S}}}[{RI}]))"),
             ("failed steps {{instance}}", f"sum by (instance) (rate(deltaserve_model_expert_move_failures_total{{{S}}}[{RI}]))")],
            unit="Bps")
    return b


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for board in (overview(), worker()):
        path = os.path.join(here, f"{board.uid}.json")
        with open(path, "w") as f:
            json.dump(board.json(), f, indent=2)
            f.write("\n")
        print(path)


if __name__ == "__main__":
    main()
