"""Writes deploy/grafana/kvserve-dashboard.json (the Grafana dashboard of kvserve and
kvserve-cache). Edit the panels here, then run:  /usr/bin/python3 deploy/grafana/dashboard.py
tests/deploy_monitoring_test.py checks that the committed JSON is this script's output, that
every metric family kvserve and kvserve-cache export has a panel, and that a real Prometheus
answers every panel's queries.

Conventions: a datasource variable ($datasource) and instance variables ($instance for kvserve,
$cache_instance for kvserve-cache; pod names on Kubernetes), and one series per instance
(`by (instance)`), never a sum over replicas that hides the one that misbehaves.
"""
import json
import os

KV = 'instance=~"$instance"'
CACHE = 'instance=~"$cache_instance"'
RATE = "[$__rate_interval]"
# kvserve_rpc_requests_total counts gRPC calls and HTTP API requests, told apart by `protocol`.
BY_PROTOCOL = "instance, protocol"


def rate(metric, selector=KV, by="instance"):
    return "sum by (%s) (rate(%s{%s}%s))" % (by, metric, selector, RATE)


def quantile(q, histogram, selector=KV, by="instance"):
    return "histogram_quantile(%s, sum by (le, %s) (rate(%s_bucket{%s}%s)))" % (
        q, by, histogram, selector, RATE)


def quantiles(histogram, qs=(0.5, 0.9, 0.99), selector=KV, by="instance"):
    return [(quantile(q, histogram, selector, by), "p%g {{%s}}" % (q * 100, by)) for q in qs]


def gauge(metric, selector=KV):
    return "%s{%s}" % (metric, selector)


# (title, unit, [(expr, legend)]) per panel, in rows.
ROWS = [
    ("Latency", [
        ("Time to first token", "s", quantiles("kvserve_request_time_to_first_token_seconds")),
        ("Inter-token latency", "s", quantiles("kvserve_request_inter_token_latency_seconds")),
        ("End-to-end latency", "s", quantiles("kvserve_request_e2e_latency_seconds",
                                              (0.5, 0.99))),
        ("Queue and prefill time (p90)", "s", [
            (quantile(0.9, "kvserve_request_queue_time_seconds"), "queue {{instance}}"),
            (quantile(0.9, "kvserve_request_prefill_time_seconds"), "prefill {{instance}}")]),
    ]),
    ("Throughput and errors", [
        ("Tokens / s", "short", [
            (rate("kvserve_request_generated_tokens_total"), "generated {{instance}}"),
            (rate("kvserve_request_prompt_tokens_total"), "prompt {{instance}}"),
            (rate("kvserve_request_computed_tokens_total"), "prefilled {{instance}}"),
            (rate("kvserve_request_cached_tokens_total", by="instance, source"),
             "cached {{source}} {{instance}}")]),
        ("Requests / s by protocol (gRPC, HTTP)", "reqps", [
            (rate("kvserve_rpc_requests_total", by="instance, protocol"),
             "{{protocol}} {{instance}}")]),
        ("Error ratio by protocol (not ok, not cancelled)", "percentunit", [
            ("(%s or %s * 0) / %s" % (
                rate("kvserve_rpc_requests_total", KV + ',code!~"ok|cancelled"', BY_PROTOCOL),
                rate("kvserve_rpc_requests_total", by=BY_PROTOCOL),
                rate("kvserve_rpc_requests_total", by=BY_PROTOCOL)),
             "{{protocol}} {{instance}}")]),
        ("Requests / s by protocol, method and code", "reqps", [
            (rate("kvserve_rpc_requests_total", by="instance, protocol, method, code"),
             "{{protocol}} {{method}} {{code}} {{instance}}")]),
        ("HTTP responses / s by status, open HTTP connections", "short", [
            (rate("kvserve_http_requests_total", by="instance, status"),
             "{{status}} {{instance}}"),
            (gauge("kvserve_http_connections"), "connections {{instance}}")]),
        ("Finished generations / s by reason", "reqps", [
            (rate("kvserve_request_finished_total", by="instance, reason"),
             "{{reason}} {{instance}}")]),
    ]),
    ("Engine", [
        ("Running and waiting requests", "short", [
            (gauge("kvserve_engine_requests_running"), "running {{instance}}"),
            (gauge("kvserve_engine_requests_waiting"), "waiting {{instance}}")]),
        ("Engine steps / s and last step time", "short", [
            (rate("kvserve_engine_steps_total"), "steps/s {{instance}}"),
            (gauge("kvserve_engine_last_step_seconds"), "last step s {{instance}}")]),
        ("Preemptions and reclaimed sessions / s", "short", [
            (rate("kvserve_engine_preemptions_total"), "preempted {{instance}}"),
            (rate("kvserve_sessions_kv_reclaimed_total"), "sessions reclaimed {{instance}}")]),
        ("Open sessions", "short", [(gauge("kvserve_sessions_open"), "{{instance}}")]),
        ("Speculative draft tokens / s (with --speculative)", "short", [
            (rate("kvserve_speculative_draft_tokens_total", by="instance, source"),
             "checked {{source}} {{instance}}"),
            (rate("kvserve_speculative_accepted_tokens_total", by="instance, source"),
             "accepted {{source}} {{instance}}"),
            (rate("kvserve_speculative_verifications_total", by="instance, source"),
             "verifications {{source}} {{instance}}")]),
        ("Speculative drafts accepted per verification", "short",
         quantiles("kvserve_speculative_accepted_length_tokens", (0.5, 0.9),
                   by="instance, source")),
    ]),
    ("KV cache", [
        ("KV blocks", "short", [
            (gauge("kvserve_kv_blocks_used"), "used {{instance}}"),
            (gauge("kvserve_kv_blocks_cached"), "cached {{instance}}"),
            (gauge("kvserve_kv_blocks_free"), "free {{instance}}"),
            (gauge("kvserve_kv_blocks_session"), "held by sessions {{instance}}"),
            (gauge("kvserve_kv_blocks_total"), "total {{instance}}")]),
        ("KV pool usage", "percentunit", [
            ("%s / %s" % (gauge("kvserve_kv_blocks_used"), gauge("kvserve_kv_blocks_total")),
             "{{instance}}")]),
        ("Prefix cache hit ratio", "percentunit", [
            ("%s / %s" % (rate("kvserve_prefix_cache_hits_total"),
                          rate("kvserve_prefix_cache_queries_total")), "{{instance}}")]),
        ("KV evictions / s", "short", [
            (rate("kvserve_kv_evictions_total"), "{{instance}}")]),
    ]),
    ("Session cache, as kvserve sees it", [
        ("Session cache up", "short", [(gauge("kvserve_session_cache_up"), "{{instance}}")]),
        ("Remote lookups, fetches and stores (blocks / s)", "short", [
            (rate("kvserve_session_cache_lookups_total"), "lookups {{instance}}"),
            (rate("kvserve_session_cache_lookup_blocks_total"), "blocks found {{instance}}"),
            (rate("kvserve_session_cache_fetched_blocks_total"), "fetched {{instance}}"),
            (rate("kvserve_session_cache_fetches_skipped_total"), "fetch skipped {{instance}}"),
            (rate("kvserve_session_cache_stored_blocks_total"), "stored {{instance}}"),
            (rate("kvserve_session_cache_sessions_restored_total"),
             "sessions restored {{instance}}"),
            (rate("kvserve_session_cache_sessions_refreshed_total"),
             "sessions refreshed {{instance}}"),
            (rate("kvserve_session_cache_session_commits_total"),
             "turns committed {{instance}}"),
            (rate("kvserve_session_cache_session_conflicts_total"),
             "turn conflicts {{instance}}")]),
        ("Remote bytes / s and fetch time", "Bps", [
            (rate("kvserve_session_cache_fetched_bytes_total"), "fetched {{instance}}"),
            (rate("kvserve_session_cache_stored_bytes_total"), "stored {{instance}}"),
            (rate("kvserve_session_cache_fetch_seconds_total"),
             "fetch s per s {{instance}}")]),
        ("Remote errors, drops and rejected records / s", "short", [
            (rate("kvserve_session_cache_errors_total"), "errors {{instance}}"),
            (rate("kvserve_session_cache_store_dropped_total"), "stores dropped {{instance}}"),
            (rate("kvserve_session_cache_rejected_blocks_total", by="instance, reason"),
             "rejected {{reason}} {{instance}}")]),
    ]),
    ("kvserve-cache", [
        ("Cache hit ratio (blocks) and lookups / s", "short", [
            ("%s / (%s + %s)" % (rate("kvserve_cache_hit_blocks_total", CACHE),
                                 rate("kvserve_cache_hit_blocks_total", CACHE),
                                 rate("kvserve_cache_miss_blocks_total", CACHE)),
             "hit ratio {{instance}}"),
            (rate("kvserve_cache_lookups_total", CACHE), "lookups/s {{instance}}")]),
        ("Held: blocks and sessions", "short", [
            (gauge("kvserve_cache_blocks", CACHE), "blocks {{instance}}"),
            (gauge("kvserve_cache_sessions", CACHE), "sessions {{instance}}")]),
        ("Held bytes and capacity", "bytes", [
            (gauge("kvserve_cache_bytes", CACHE), "held {{instance}}"),
            (gauge("kvserve_cache_capacity_bytes", CACHE), "capacity {{instance}}")]),
        ("Bytes stored and served / s", "Bps", [
            (rate("kvserve_cache_stored_bytes_total", CACHE), "stored {{instance}}"),
            (rate("kvserve_cache_served_bytes_total", CACHE), "served {{instance}}")]),
        ("Blocks stored, evicted, rejected, dropped / s", "short", [
            (rate("kvserve_cache_stored_blocks_total", CACHE), "stored {{instance}}"),
            (rate("kvserve_cache_evicted_blocks_total", CACHE, by="instance, reason"),
             "evicted {{reason}} {{instance}}"),
            (rate("kvserve_cache_rejected_blocks_total", CACHE, by="instance, reason"),
             "rejected {{reason}} {{instance}}"),
            (rate("kvserve_cache_dropped_blocks_total", CACHE), "dropped {{instance}}")]),
        ("Cache RPCs / s by method and code", "reqps", [
            (rate("kvserve_cache_rpc_requests_total", CACHE, by="instance, method, code"),
             "{{method}} {{code}} {{instance}}")]),
        ("Cache RPC duration p99 by method", "s", [
            (quantile(0.99, "kvserve_cache_rpc_duration_seconds", CACHE, by="instance, method"),
             "{{method}} {{instance}}")]),
    ]),
    ("Processes (kvserve and kvserve-cache)", [
        ("Resident memory", "bytes", [
            ("process_resident_memory_bytes{job=~\"kvserve|kvserve-cache\"}",
             "{{job}} {{instance}}"),
            ("process_virtual_memory_bytes{job=~\"kvserve|kvserve-cache\"}",
             "virtual {{job}} {{instance}}")]),
        ("CPU (cores)", "short", [
            ("rate(process_cpu_seconds_total{job=~\"kvserve|kvserve-cache\"}%s)" % RATE,
             "{{job}} {{instance}}")]),
        ("Open file descriptors and limit", "short", [
            ("process_open_fds{job=~\"kvserve|kvserve-cache\"}", "open {{job}} {{instance}}"),
            ("process_max_fds{job=~\"kvserve|kvserve-cache\"}", "max {{job}} {{instance}}")]),
        ("Uptime", "s", [
            ("time() - process_start_time_seconds{job=~\"kvserve|kvserve-cache\"}",
             "{{job}} {{instance}}")]),
        ("Build", "short", [
            ("kvserve_build_info{%s}" % KV,
             "{{version}} {{commit}} {{backend}} {{kernel_level}} {{blas_core}} {{instance}}")]),
        ("Degraded paths (1 = a slow path runs)", "short", [
            ("kvserve_degraded_path{%s}" % KV, "{{path}} {{instance}}")]),
    ]),
]

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def variable(name, label, metric):
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": "label_values(%s, instance)" % metric, "refId": name},
        "definition": "label_values(%s, instance)" % metric,
        "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard():
    panels = []
    y = 0
    panel_id = 1
    for row_title, row_panels in ROWS:
        panels.append({"id": panel_id, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        panel_id += 1
        y += 1
        for i, (title, unit, targets) in enumerate(row_panels):
            panels.append({
                "id": panel_id, "type": "timeseries", "title": title, "datasource": DATASOURCE,
                "gridPos": {"x": (i % 2) * 12, "y": y + (i // 2) * 8, "w": 12, "h": 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                            "tooltip": {"mode": "multi"}},
                "targets": [{"refId": chr(ord("A") + k), "expr": expr, "legendFormat": legend,
                             "datasource": DATASOURCE}
                            for k, (expr, legend) in enumerate(targets)],
            })
            panel_id += 1
        y += ((len(row_panels) + 1) // 2) * 8
    return {
        "uid": "kvserve", "title": "kvserve", "schemaVersion": 38, "version": 2,
        "editable": True, "time": {"from": "now-30m", "to": "now"}, "refresh": "10s",
        "tags": ["kvserve"],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            variable("instance", "kvserve", "kvserve_engine_steps_total"),
            variable("cache_instance", "kvserve-cache", "kvserve_cache_lookups_total"),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render():
    return json.dumps(dashboard(), indent=1) + "\n"


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kvserve-dashboard.json")
    with open(path, "w") as f:
        f.write(render())
