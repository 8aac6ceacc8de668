"""Load for the reliability tests (load_soak_test.py, fault_matrix_test.py): runs
`kvserve-cli bench` (the one load generator, client/load_generator.h) against a real
kvserve and reads what it saw (its JSON report and call log) and what the server saw
(/metrics scrapes, resident memory).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import kvserve_testlib as lib

# Prompts of different lengths (stories260K is a TinyStories model); greedy outputs of one
# prompt must agree with each other whatever else runs beside them.
PROMPTS = [
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "One day, a big dog went to the park. He saw a ball and",
    "Tom and his mom went to the store to buy some food. Tom wanted",
    "The sun was shining and the birds were singing. A little boy named Tim",
    ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
     "the sun with her big red ball. One day, she went to the park with her mom. "
     "She saw a big tree and"),
]

# Independent greedy streams over PROMPTS of 16-48 tokens.
STREAM_ARGS = ["--max-tokens", "48", "--max-tokens-min", "16", "--record-outputs"]
# Conversations: a session per conversation, three streamed turns (the first a prompt of
# PROMPTS, its greedy answer the stateless one) of 8-24 tokens, then the session closed.
CONVERSATION_ARGS = ["--shape", "conversation", "--turns", "3", "--max-tokens", "24",
                 "--max-tokens-min", "8", "--record-outputs"]


class Bench:
    """`kvserve-cli bench` against `target`, as a process: `seconds` long (or until
    stop()), `concurrency` workers, greedy, without the client's retries (every call the
    server sees is one the report counts) and with a 50 ms pause after a retryable
    failure (as a retrying client backs off), no warm-up; each request draws from PROMPTS
    unless `prompts` is false. wait() returns its JSON report and its calls, each a dict
    {t (CLOCK_MONOTONIC, as time.monotonic()), method, code, message}. As a context
    manager it kills a run still going at exit."""

    def __init__(self, cli, target, concurrency, seconds=None, requests=None, args=(),
                 prompts=True):
        self.tmp = tempfile.mkdtemp(prefix="kvserve-bench-")
        self.call_log = os.path.join(self.tmp, "calls.jsonl")
        cmd = [cli, "bench", "--target", target, "--json", "--temperature", "0",
               "--concurrency", str(concurrency), "--warmup", "0", "--max-attempts", "1",
               "--pause-after-failure", "50ms", "--timeout", "60s",
               "--call-log", self.call_log]
        if seconds is not None:
            cmd += ["--requests", "0", "--duration", "%gs" % seconds]
        else:
            cmd += ["--requests", str(requests)]
        if prompts:
            path = os.path.join(self.tmp, "prompts")
            with open(path, "w") as f:
                f.write("\n".join(PROMPTS) + "\n")
            cmd += ["--prompts-file", path]
        self.proc = subprocess.Popen(cmd + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Kills a run still going (a test that failed before wait())."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stop(self):
        """Ends the run early (SIGINT): calls in flight end, the report is printed."""
        self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError("kvserve-cli bench still running after %.0f s:\n%s"
                                 % (timeout, err[-4000:]))
        try:
            lib.check_no_sanitizer_report(err.splitlines(), "kvserve-cli bench")
            # 0: every call OK; 3: some failed (the tests judge which).
            if self.proc.returncode not in (0, 3):
                raise AssertionError("kvserve-cli bench exited %d:\n%s"
                                     % (self.proc.returncode, err[-4000:]))
            report = json.loads(out.strip().splitlines()[-1])
            with open(self.call_log, errors="replace") as f:
                calls = [json.loads(line) for line in f]
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return report, calls


def count(report, method, code):
    """Calls of `method` that ended with `code` ("OK", "RESOURCE_EXHAUSTED"), per the report."""
    return report["calls"].get(method, {}).get(code, 0)


def inconsistent_outputs(outputs):
    """Prompts whose greedy outputs (prompt -> texts) are not all prefixes of the longest."""
    bad = {}
    for prompt, texts in outputs.items():
        longest = max(texts, key=len)
        if any(not longest.startswith(t) for t in texts):
            bad[prompt] = sorted(texts, key=len)
    return bad


class RssSampler:
    """Samples a process's resident size every `interval` seconds until stop()."""

    def __init__(self, pid, interval=0.5):
        self.pid, self.interval = pid, interval
        self.samples = []  # (seconds since start, bytes)
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.interval):
            self.samples.append((time.monotonic() - self._start, lib.rss_bytes(self.pid)))

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.samples


def scrape(port):
    """/metrics as {(name, ((label, value), ...)): value}."""
    out = {}
    for line in lib.scrape(port).splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        if "{" in head:
            name, labels = head[:-1].split("{", 1)
            pairs = tuple(sorted(tuple(p.split("=", 1)) for p in split_labels(labels)))
            pairs = tuple((k, v.strip('"')) for k, v in pairs)
        else:
            name, pairs = head, ()
        out[(name, pairs)] = float(value)
    return out


def split_labels(labels):
    parts, quoted, cur = [], False, ""
    for ch in labels:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def metric(metrics, name, **labels):
    """One sample's value (0 when absent)."""
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def served_calls(before, after, method, code_name):
    """Calls of `method` the server finished with `code_name` ("OK", as gRPC names codes)
    between two scrapes."""
    labels = {"method": method, "code": code_name.lower(), "protocol": "grpc"}
    return (metric(after, "kvserve_rpc_requests_total", **labels) -
            metric(before, "kvserve_rpc_requests_total", **labels))


def histogram_quantile(metrics, name, q):
    """The upper bound of the bucket holding quantile q of histogram `name` (no labels)."""
    buckets = sorted((float("inf") if dict(k)["le"] == "+Inf" else float(dict(k)["le"]), v)
                     for (n, k), v in metrics.items() if n == name + "_bucket")
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    for le, n in buckets:
        if n >= rank:
            return le
    return float("inf")


def wait_idle(port, timeout=60.0):
    """Waits until the engine runs and queues nothing; returns the last scrape."""
    end = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if (metric(m, "kvserve_engine_requests_running") == 0 and
                metric(m, "kvserve_engine_requests_waiting") == 0):
            return m
        if time.monotonic() > end:
            raise AssertionError("engine not idle after %.0f s" % timeout)
        time.sleep(0.1)
