"""deploy/'s dashboard and alert rules against live binaries: a real kvserve (with a session
cache) and a real kvserve-cache serve traffic (gRPC, and HTTP once kvserve has it); every
metric name the dashboard and the rules use is exported by one of them, every family they
export has a panel, request panels split by protocol (grpc, http), promtool accepts the
Prometheus config and rules (and the rules' unit tests pass, with a test for every alert), and
a real Prometheus (Debian's) scraping both answers every panel's queries with data and
evaluates every rule.

Metrics another branch adds are listed in PENDING: until it is merged they may be missing
(the test prints them); once exported, they are checked like the others.

Usage: /usr/bin/python3 deploy_monitoring_test.py KVSERVE_BIN CACHE_BIN MODEL PYTHON_STUBS_DIR
"""
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import grpc
import yaml

KVSERVE, CACHE, MODEL, PYDIR = sys.argv[1:5]
del sys.argv[1:5]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402

DEPLOY = os.path.join(HERE, "..", "deploy")
DASHBOARD = os.path.join(DEPLOY, "grafana", "kvserve-dashboard.json")
PROM_DIR = os.path.join(DEPLOY, "prometheus")
RULES = os.path.join(PROM_DIR, "kvserve-alerts.yml")
PROMTOOL = "/usr/bin/promtool"

# Added by the OpenAI-compatible HTTP API (issue 39): HTTP responses by status and open HTTP
# connections (the "HTTP responses" panel, the KvserveHttpServerErrorsHigh rule).
PENDING = {"kvserve_http_requests_total", "kvserve_http_connections"}
# Series Prometheus makes itself.
PROMETHEUS_OWN = {"up"}
NAME_RE = re.compile(r"\b((?:kvserve|process)_[a-z0-9_]+|up)\b")


def dashboard_targets():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    return [(p["title"], [t["expr"] for t in p["targets"]])
            for p in dashboard["panels"] if p["type"] != "row"]


def rule_exprs():
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def exposed(text):
    """(family names from # TYPE lines, sample names) of an exposition."""
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    samples = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    return families, samples


def grafana_to_promql(expr):
    """A panel query as Grafana sends it with every instance selected."""
    return (expr.replace("$__rate_interval", "1m").replace("$cache_instance", ".*")
            .replace("$instance", ".*"))


def drive_traffic(server):
    """gRPC: stateless and streamed generations, one failing request, a three-turn session;
    HTTP (when the server has an HTTP port): the model list, a completion, a malformed body."""
    drive_grpc_traffic(server.target())
    if getattr(server, "http_port", None):
        drive_http_traffic("http://127.0.0.1:%d" % server.http_port)


def drive_http_traffic(base):
    def post(path, data):
        request = urllib.request.Request(base + path, data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    with urllib.request.urlopen(base + "/v1/models", timeout=30) as response:
        model = json.load(response)["data"][0]["id"]
    post("/v1/completions", json.dumps({"model": model, "prompt": "Once upon a time",
                                        "max_tokens": 8, "temperature": 0}).encode())
    try:
        post("/v1/completions", b"{not json")
        raise AssertionError("a malformed body was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400, e


def drive_grpc_traffic(target):
    with grpc.insecure_channel(target) as channel:
        api = lib.Inference(channel)
        generate, stream, open_session = api.generate, api.generate_stream, api.open_session
        greedy = pb.SamplingParams(temperature=0.0)
        for text in ("Once upon a time", "Once upon a time there was", "The dog ran"):
            generate(pb.GenerateRequest(text=text, max_tokens=16, sampling=greedy), timeout=30)
        list(stream(pb.GenerateRequest(text="Lily saw a cat", max_tokens=16, sampling=greedy),
                    timeout=30))
        try:
            generate(pb.GenerateRequest(text="x", max_tokens=-1), timeout=30)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        session_id = open_session(pb.OpenSessionRequest(), timeout=10).session_id
        for text in ("Once upon a time, there was a little girl named Lily.",
                     " She saw a big dog.", " The dog was happy."):
            generate(pb.GenerateRequest(text=text, session_id=session_id, max_tokens=8,
                                        sampling=greedy), timeout=30)


class MonitoringTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cache = lib.CacheProcess(CACHE, metrics=True).__enter__()
        cls.server = lib.KvserveProcess(
            KVSERVE, MODEL, ["--kv-budget-mib", "64", "--session-cache",
                             cls.cache.target(), "--speculative", "ngram",
                             # Draft whenever allowed: the adaptive governor keeps drafts only
                             # where it measures them faster, which on a loaded machine can leave
                             # no verification in the traffic and the accepted-length panel empty.
                             "--speculative-adaptive=false"]).__enter__()
        drive_traffic(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        cls.cache.__exit__(None, None, None)

    def scrape_both(self):
        kv = exposed(lib.scrape(self.server.metrics_port))
        cache = exposed(lib.scrape(self.cache.metrics_port))
        return kv, cache

    def test_dashboard_json_is_the_generators_output(self):
        spec = importlib.util.spec_from_file_location(
            "dashboard", os.path.join(DEPLOY, "grafana", "dashboard.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with open(DASHBOARD) as f:
            self.assertEqual(f.read(), module.render(),
                             "run /usr/bin/python3 deploy/grafana/dashboard.py")
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        names = [v["name"] for v in dashboard["templating"]["list"]]
        self.assertEqual(names, ["datasource", "instance", "cache_instance"])
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
            for expr in (t["expr"] for t in panel["targets"]):
                # Per-instance series: any aggregation keeps the instance label; requests
                # (gRPC calls and HTTP API requests in one family) per protocol too.
                for by in re.findall(r"sum by \(([^)]*)\)", expr):
                    self.assertIn("instance", by, "%s: %s" % (panel["title"], expr))
                    if "kvserve_rpc_requests_total" in expr:
                        self.assertIn("protocol", by, "%s: %s" % (panel["title"], expr))

    def test_every_name_used_exists_and_every_family_has_a_panel(self):
        (kv_families, kv_samples), (cache_families, cache_samples) = self.scrape_both()
        live = kv_families | kv_samples | cache_families | cache_samples | PROMETHEUS_OWN
        used = set()
        for _, exprs in dashboard_targets():
            for e in exprs:
                used.update(NAME_RE.findall(e))
        for e in rule_exprs():
            used.update(NAME_RE.findall(e))
        missing = used - live
        pending = missing & PENDING
        if pending:
            print("pending (exported once the HTTP API is merged): %s" % sorted(pending))
        self.assertEqual(missing - PENDING, set(), "used but not exported")
        # Both binaries export the process families.
        for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                     "process_open_fds", "process_start_time_seconds"):
            self.assertIn(name, kv_families)
            self.assertIn(name, cache_families)
        with open(os.path.join(HERE, "..", "README.md")) as f:
            readme = f.read()
        # The rows of the "## Metrics" section's table (other sections have tables too).
        metrics_section = readme.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
        readme_rows = set(re.findall(r"^\| `([a-z0-9_]+)` \|", metrics_section, re.M))
        self.assertEqual((kv_families | cache_families) - readme_rows, set(),
                         "exported but not in README.md's metrics table")
        self.assertEqual(readme_rows - live - PENDING, set(),
                         "in README.md's metrics table but not exported")
        dashboard_text = " ".join(e for _, exprs in dashboard_targets() for e in exprs)
        for family in sorted(kv_families | cache_families):
            self.assertRegex(dashboard_text, r"\b%s(_bucket)?\b" % re.escape(family),
                             "no panel shows %s" % family)

    def test_promtool_accepts_config_and_rules(self):
        for args in (["check", "config", os.path.join(PROM_DIR, "prometheus.yml")],
                     ["check", "rules", RULES]):
            run = subprocess.run([PROMTOOL] + args, capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        run = subprocess.run([PROMTOOL, "test", "rules", "kvserve-alerts.test.yml"],
                             cwd=PROM_DIR, capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        # Every alert has a unit test in which it fires.
        with open(RULES) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
        with open(os.path.join(PROM_DIR, "kvserve-alerts.test.yml")) as f:
            tests = yaml.safe_load(f)["tests"]
        firing = {t["alertname"] for test in tests for t in test["alert_rule_test"]
                  if t["exp_alerts"]}
        self.assertEqual(alerts - firing, set(), "alerts without a unit test that fires them")

    def test_prometheus_answers_every_panel_and_evaluates_every_rule(self):
        with open(os.path.join(PROM_DIR, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        # The deploy config with the live loopback targets and a 1 s interval.
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        targets = {"kvserve": ["127.0.0.1:%d" % self.server.metrics_port],
                   "kvserve-cache": ["127.0.0.1:%d" % self.cache.metrics_port]}
        for job in config["scrape_configs"]:
            job["static_configs"] = [{"targets": targets[job["job_name"]]}]
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(RULES, tmp)
            with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
                yaml.safe_dump(config, f)
            with lib.PrometheusProcess(os.path.join(tmp, "prometheus.yml"), tmp) as prom:
                self.check_prometheus(prom)

    def check_prometheus(self, prom):
        def both_up():
            up = prom.query("up")
            # Two scrapes of each target so far: rates over the traffic below have a base.
            scrapes = prom.query("count_over_time(up[1m])")
            return (len(up) == 2 and all(r["value"][1] == "1" for r in up) and
                    len(scrapes) == 2 and all(float(r["value"][1]) >= 2 for r in scrapes))
        lib.poll(both_up, 60, "both targets up and scraped twice")
        drive_traffic(self.server)  # inside the 1m rate window, after two scrapes

        def answers(exprs):
            # Some target of the panel returns a series with a finite value.
            for e in exprs:
                for r in prom.query(grafana_to_promql(e)):
                    if math.isfinite(float(r["value"][1])):
                        return True
            return False

        for title, exprs in dashboard_targets():
            names = set(n for e in exprs for n in NAME_RE.findall(e))
            if names & PENDING and not answers(exprs):
                print("panel %r: no data yet (pending metric %s)" % (title, names & PENDING))
                continue
            lib.poll(lambda: answers(exprs), 30, "data for panel %r: %s" % (title, exprs))

        def rules_evaluated():
            groups = prom.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            bad = [(r["name"], r.get("health"), r.get("lastError")) for r in rules
                   if r.get("health") != "ok"]
            if bad:
                print("rules not (yet) ok: %r" % bad)
            return len(rules) == len(rule_exprs()) and not bad
        lib.poll(rules_evaluated, 30, "every rule evaluated without error", interval=1)


if __name__ == "__main__":
    lib.main(230)
