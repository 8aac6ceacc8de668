"""The official `openai` npm package drives a real kvserve's OpenAI-compatible HTTP API.

tests/openai/openai_client_test.mjs holds the client side (node:test), in groups, each against a
kvserve started here with the flags it needs (stories260K with --chat-template chatml, the
reference backend so that a 480-token generation lasts long enough to abort or drain):
  main   auth off: models, chat and completions streamed and not, usage in streams, stop, seed,
         n, logprobs, 400 (with param) / 404 / 405 / 413, a disconnect mid-stream (cancelled in
         /metrics), a multi-turn conversation whose later turns report cached tokens
  auth   --auth-tokens: 401 invalid_api_key without or with a wrong key, 200 with a listed one
  queue  --max-running 1 --max-waiting 1: a flood gets 429 with Retry-After
  drain  SIGTERM with a backlog: 503 with Retry-After for new requests, the backlog finishes
  grace  SIGTERM with a short --drain-grace: a stream cut by it ends with an error event
This side checks what the client cannot see: the metrics the groups leave, the exit code after
the drain, 503 while the model loads, and "http off".

The package is installed with `npm ci` (tests/openai/package-lock.json) into WORK_DIR, next to a
copy of the script, so nothing lands in the source tree; a matching install is reused.

Usage: /usr/bin/python3 openai_client_test.py KVSERVE_BIN MODEL_PATH WORK_DIR
Prints "SKIPPED: node" and exits 0 when node or npm is missing (scripts/install-deps.sh installs
them).
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

KVSERVE, MODEL, WORK_DIR = sys.argv[1:4]
WORK_DIR = os.path.abspath(WORK_DIR)
del sys.argv[1:4]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvserve_testlib as lib  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "openai")
PACKAGE_FILES = ["package.json", "package-lock.json", "openai_client_test.mjs"]
SERVED_NAME = os.path.splitext(os.path.basename(MODEL))[0]
# Every server of this test (kvserve_testlib puts HTTP on an ephemeral port): a chat template for
# stories260K, the slower reference backend (about 1 ms a token: a long generation can be aborted
# or drained).
HTTP_ARGS = ["--chat-template", "chatml", "--kv-budget-mib", "64", "--backend", "reference"]


def install_package():
    """Copies tests/openai into WORK_DIR and runs `npm ci` there unless node_modules already
    holds the locked openai version."""
    os.makedirs(WORK_DIR, exist_ok=True)
    for name in PACKAGE_FILES:
        shutil.copyfile(os.path.join(PACKAGE_DIR, name), os.path.join(WORK_DIR, name))
    with open(os.path.join(WORK_DIR, "package-lock.json")) as f:
        locked = json.load(f)["packages"]["node_modules/openai"]["version"]
    installed = os.path.join(WORK_DIR, "node_modules", "openai", "package.json")
    if os.path.exists(installed):
        with open(installed) as f:
            if json.load(f)["version"] == locked:
                return
    run = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WORK_DIR,
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError("npm ci failed in %s:\n%s%s" % (WORK_DIR, run.stdout, run.stderr))


def run_group(server, group, extra_env=None):
    """Runs the node test group against `server`; fails the calling test with node's report."""
    env = dict(os.environ, OPENAI_BASE_URL=server.http_base(),
               KVSERVE_METRICS_URL="http://127.0.0.1:%d/metrics" % server.metrics_port,
               KVSERVE_MODEL=SERVED_NAME, **(extra_env or {}))
    run = subprocess.run(["node", os.path.join(WORK_DIR, "openai_client_test.mjs"), group],
                         cwd=WORK_DIR, env=env, capture_output=True, text=True, timeout=240)
    report = "node %s group:\n%s%s" % (group, run.stdout, run.stderr)
    print(report)
    if run.returncode != 0:
        raise AssertionError(report + "\nkvserve:\n" + "\n".join(server.lines[-40:]))


def http_request(port, method, path, body=None, headers=None):
    """(status, headers, decoded body) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        conn.close()


class OpenAIClientTest(unittest.TestCase):

    def assertMetricsAtLeast(self, server, name, samples):
        """Each labels dict of `samples` has a value >= 1 of `name`, within 10 s: an HTTP
        request's kvserve_rpc_requests_total sample is recorded when the exchange is complete on
        the server, which may come after the client has read its answer."""
        deadline = time.monotonic() + 10
        while True:
            text = lib.scrape(server.metrics_port)
            missing = [labels for labels in samples if lib.metric_value(text, name, labels) < 1]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(missing, [], name)

    def test_main_group(self):
        args = HTTP_ARGS + ["--max-message-bytes", "65536"]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            run_group(server, "main")
            self.assertMetricsAtLeast(server, "kvserve_http_requests_total",
                                      [{"status": s} for s in ("200", "400", "404", "405", "413")])
            http = {"protocol": "http"}
            self.assertMetricsAtLeast(server, "kvserve_rpc_requests_total", [
                dict(http, method="chat.completions", code="ok"),
                dict(http, method="completions", code="ok"),
                dict(http, method="models", code="ok"),
                dict(http, method="chat.completions", code="invalid_argument"),
                dict(http, method="chat.completions", code="not_found"),
                dict(http, method="chat.completions", code="cancelled"),
            ])
            # Every connection of the finished client is closed.
            lib.poll(lambda: lib.metric_value(lib.scrape(server.metrics_port),
                                              "kvserve_http_connections") == 0,
                     10, "kvserve_http_connections 0")

    def test_auth_group(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens")
            with open(tokens, "w") as f:
                f.write("# test tokens\nlisted-token-1 tenant-a\n")
            args = HTTP_ARGS + ["--auth-tokens", tokens]
            with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
                run_group(server, "auth", {"KVSERVE_API_KEY": "listed-token-1"})
                self.assertMetricsAtLeast(server, "kvserve_http_requests_total",
                                          [{"status": "401"}])
                self.assertMetricsAtLeast(server, "kvserve_rpc_requests_total", [
                    {"protocol": "http", "code": "unauthenticated"}])

    def test_queue_full_group(self):
        with lib.KvserveProcess(KVSERVE, MODEL, HTTP_ARGS + ["--max-running", "1",
                                                             "--max-waiting", "1"]) as server:
            run_group(server, "queue")
            self.assertMetricsAtLeast(server, "kvserve_http_requests_total", [{"status": "429"}])
            self.assertMetricsAtLeast(server, "kvserve_rpc_requests_total", [
                {"protocol": "http", "method": "chat.completions", "code": "resource_exhausted"}])

    def test_drain_group(self):
        with lib.KvserveProcess(KVSERVE, MODEL, HTTP_ARGS + ["--max-running", "1",
                                                             "--drain-grace", "60s"]) as server:
            run_group(server, "drain", {"KVSERVE_PID": str(server.proc.pid)})
            self.assertEqual(server.proc.wait(timeout=60), 0, server.lines)

    def test_grace_group(self):
        with lib.KvserveProcess(KVSERVE, MODEL, HTTP_ARGS + ["--max-running", "1",
                                                             "--drain-grace", "100ms"]) as server:
            run_group(server, "grace", {"KVSERVE_PID": str(server.proc.pid)})
            self.assertEqual(server.proc.wait(timeout=60), 0, server.lines)
            self.assertTrue(any("the rest cancelled" in l for l in server.lines), server.lines)

    def test_503_while_loading(self):
        # A 2 GiB KV pool made resident at start keeps the model "loading" for a while after
        # the listening line.
        args = ["--chat-template", "chatml", "--kv-budget-mib", "2048", "--kv-prefault=true"]
        with lib.KvserveProcess(KVSERVE, MODEL, args, wait_ready=False) as server:
            status, _, body = http_request(server.http_port, "GET", "/health")
            chat = http_request(server.http_port, "POST", "/v1/chat/completions",
                                json.dumps({"model": SERVED_NAME, "max_tokens": 4,
                                            "messages": [{"role": "user", "content": "Hi"}]}),
                                {"Content-Type": "application/json"})
            hint = ("; if kvserve was ready before the probes, raise --kv-budget-mib: %r"
                    % server.lines)
            self.assertEqual(status, 503, body + hint)
            self.assertEqual(chat[0], 503, chat[2] + hint)
            self.assertTrue(chat[1]["Retry-After"].isdigit(), chat[1])
            error = json.loads(chat[2])["error"]
            self.assertEqual((error["type"], error["code"]),
                             ("server_error", "service_unavailable"))
            server.wait_for_line("ready", 120)
            status, _, body = http_request(server.http_port, "GET", "/health")
            self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))

    def test_http_off(self):
        args = ["--http-listen", "", "--kv-budget-mib", "64"]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            self.assertIsNone(server.http_port)
            self.assertTrue(any("http off" in l for l in server.lines), server.lines)


if __name__ == "__main__":
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        print("SKIPPED: node: %s not found (scripts/install-deps.sh installs nodejs and npm)"
              % " and ".join(missing))
        sys.exit(0)
    install_package()
    lib.main(280)
