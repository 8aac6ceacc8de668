"""Helpers for the Python tests that run the real `kvserve` binary.

Starts the server on ephemeral loopback ports (--listen/--metrics-listen 127.0.0.1:0),
reads the bound ports from its first stdout line, and always cleans the process up.
Every wait is bounded.
"""
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import grpc


def main(seconds):
    """Runs the unittest main of the calling test file, verbosely, with a watchdog: if the
    run is not over after `seconds` (set it below the CTest timeout), every thread's stack
    is printed and the process exits, so a hang shows where it is instead of ending as a
    bare CTest timeout."""
    import faulthandler
    import unittest
    faulthandler.dump_traceback_later(seconds, exit=True)
    unittest.main(module="__main__", verbosity=2)


# A report of AddressSanitizer, LeakSanitizer, UBSan or ThreadSanitizer in a process's
# output (the suites run these tests against sanitizer builds of the binaries).
SANITIZER_REPORT_RE = re.compile(r"(ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|"
                                 r"runtime error: )")


def check_no_sanitizer_report(lines, what):
    """Raises AssertionError quoting the first sanitizer report in `lines`."""
    for i, line in enumerate(lines):
        if SANITIZER_REPORT_RE.search(line):
            raise AssertionError("%s: sanitizer report:\n%s" % (what, "\n".join(lines[i:i + 40])))


def add_python_stubs(pydir):
    """Makes the protoc --python_out modules (kvserve.v1.inference_pb2) importable."""
    if pydir not in sys.path:
        sys.path.insert(0, pydir)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(fn, timeout, what, interval=0.2):
    """Calls fn() until it returns a truthy value, which it returns; exceptions count as not
    yet (a server still starting). After `timeout` seconds raises AssertionError naming
    `what` with the last value or exception."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            value = fn()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 -- reported if it never succeeds
            last = e
        time.sleep(interval)
    raise AssertionError("timed out after %gs waiting for %s (last: %r)" % (timeout, what, last))


class KvserveProcess:
    """A `kvserve` subprocess. Use as a context manager.

    Entering waits until the server printed "ready" (wait_ready=False: only until its
    listening line, while the model still loads; then call wait_for_line("ready", ...)).
    The ports come from the listening line; the HTTP API listens on an ephemeral port
    (http_port) unless extra_args turn it off ("--http-listen", "": http_port None)."""

    LISTEN_RE = re.compile(r"listening on \S+ \(port (\d+)\), metrics on \S* \(port (\d+)\)"
                           r"(?:, http on \S* \(port (\d+)\))?")

    def __init__(self, binary, model, extra_args=(), timeout=30.0, env=None, wait_ready=True):
        self.args = [binary, "--model", model, "--listen", "127.0.0.1:0",
                     "--metrics-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                     "--threads", "1"] + list(extra_args)
        self.timeout = timeout
        self.env = env  # the process environment; None = this process's
        self.wait_ready = wait_ready
        self.proc = None
        self.port = None
        self.metrics_port = None
        self.http_port = None  # None when the HTTP API is off (--http-listen "")
        self.lines = []
        self._cv = threading.Condition()
        self._eof = False

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=self.env)
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_for_line("ready" if self.wait_ready else "listening on", self.timeout)
        with self._cv:
            lines = list(self.lines)
        for line in lines:
            m = self.LISTEN_RE.search(line)
            if m:
                self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
                self.http_port = int(m.group(3)) if m.group(3) else None
        if self.port is None:
            raise RuntimeError("no listening line in: %r" % self.lines)
        return self

    def _pump(self):
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def wait_for_line(self, needle, timeout):
        end = time.monotonic() + timeout
        with self._cv:
            while not any(needle in l for l in self.lines):
                left = end - time.monotonic()
                if left <= 0 or self._eof:
                    raise RuntimeError("kvserve did not print %r: %r" % (needle, self.lines))
                self._cv.wait(min(left, 0.5))

    def target(self):
        return "127.0.0.1:%d" % self.port

    def http_base(self):
        """The OpenAI-compatible API's base URL, e.g. http://127.0.0.1:PORT/v1."""
        if self.http_port is None:
            raise RuntimeError("kvserve runs without HTTP (--http-listen): %r" % self.lines)
        return "http://127.0.0.1:%d/v1" % self.http_port

    def terminate_and_wait(self, timeout=30.0):
        """Sends SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        with self._cv:  # the rest of the output (a sanitizer report comes last)
            end = time.monotonic() + 5
            while not self._eof and time.monotonic() < end:
                self._cv.wait(0.5)
        self.proc.stdout.close()
        if exc[0] is None:  # else the test's own failure is the one to report
            check_no_sanitizer_report(self.lines, "kvserve")


class CacheProcess:
    """A `kvserve-cache` subprocess on `port` (0: any free one); with metrics=True also
    serves /metrics on an ephemeral port (metrics_port). Use as a context manager (exit
    sends SIGTERM); `kill()` SIGKILLs it."""

    LISTEN_RE = re.compile(r"kvserve-cache listening on \S+:(\d+)")
    METRICS_RE = re.compile(r"metrics port (\d+)")

    def __init__(self, binary, args=(), port=0, metrics=False, timeout=30.0):
        self.args = [binary, "--listen", "127.0.0.1:%d" % port,
                     "--metrics-listen", "127.0.0.1:0" if metrics else ""] + list(args)
        self.timeout = timeout
        self.proc = None
        self.port = None
        self.metrics_port = None  # when args turn /metrics on
        self.lines = []

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        end = time.monotonic() + self.timeout
        for line in self.proc.stdout:  # ends at EOF if the process exits
            self.lines.append(line)
            m = self.LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(1))
                metrics = self.METRICS_RE.search(line)
                self.metrics_port = int(metrics.group(1)) if metrics else None
                break
            if time.monotonic() > end:
                break
        if self.port is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise RuntimeError("kvserve-cache did not start: %r" % self.lines)
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout),
                                        daemon=True)
        self._reader.start()
        return self

    def target(self):
        return "127.0.0.1:%d" % self.port

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        self.proc.stdout.close()
        if exc[0] is None:
            check_no_sanitizer_report([l.rstrip("\n") for l in self.lines], "kvserve-cache")


def wait_for(predicate, timeout=20.0, what="condition"):
    """Polls `predicate` (RpcErrors and OSErrors, e.g. a refused TLS handshake, count as
    False) until it holds; AssertionError after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except (grpc.RpcError, OSError):
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Inference:
    """Stubs of kvserve.v1.Inference on `channel` (call add_python_stubs first)."""

    def __init__(self, channel):
        from kvserve.v1 import inference_pb2 as pb
        u = channel.unary_unary
        self.generate = u("/kvserve.v1.Inference/Generate",
                          request_serializer=pb.GenerateRequest.SerializeToString,
                          response_deserializer=pb.GenerateResponse.FromString)
        self.generate_stream = channel.unary_stream(
            "/kvserve.v1.Inference/GenerateStream",
            request_serializer=pb.GenerateRequest.SerializeToString,
            response_deserializer=pb.GenerateStreamResponse.FromString)
        self.open_session = u("/kvserve.v1.Inference/OpenSession",
                              request_serializer=pb.OpenSessionRequest.SerializeToString,
                              response_deserializer=pb.Session.FromString)
        self.get_model_info = u("/kvserve.v1.Inference/GetModelInfo",
                                request_serializer=pb.GetModelInfoRequest.SerializeToString,
                                response_deserializer=pb.ModelInfo.FromString)
        self.close_session = u("/kvserve.v1.Inference/CloseSession",
                               request_serializer=pb.CloseSessionRequest.SerializeToString,
                               response_deserializer=pb.CloseSessionResponse.FromString)


class PrometheusProcess:
    """Debian's /usr/bin/prometheus on a free loopback port with `config_path`, its data and
    log in `tmpdir`. Use as a context manager; query() runs PromQL through the HTTP API."""

    def __init__(self, config_path, tmpdir):
        self.port = free_port()
        self.args = ["/usr/bin/prometheus", "--config.file=" + config_path,
                     "--storage.tsdb.path=" + os.path.join(tmpdir, "data"),
                     "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"]
        self.log_path = os.path.join(tmpdir, "prometheus.log")

    def __enter__(self):
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=log)
        return self

    def api(self, path, params=None):
        import json
        import urllib.parse
        import urllib.request
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError("%s failed: %r" % (url, body))
        return body["data"]

    def query(self, promql):
        return self.api("query", {"query": promql})["result"]

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def scrape(port, timeout=10.0):
    """The text of http://127.0.0.1:PORT/metrics."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout) as resp:
        return resp.read().decode()


def metric_value(text, name, labels=None):
    """Sum of the samples of `name` in exposition `text` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in (labels or {}).items()):
            total += float(m.group(3))
    return total


def write_gguf_with_string(src, dst, key, value):
    """Copies the GGUF file `src` to `dst` with the string metadata `key` = `value` added.

    The new pair goes right after the header, followed by a padding pair that makes the
    inserted bytes a multiple of 256, so every tensor keeps its offset from the (equally
    shifted) data section under any alignment up to 256. `key` must not be in `src`.
    """
    def kv(k, v):
        k, v = k.encode(), v.encode()
        return (struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) +
                struct.pack("<Q", len(v)) + v)
    with open(src, "rb") as f:
        data = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data)
    assert magic == b"GGUF", src
    added = kv(key, value)
    empty_pad = len(kv("kvserve.test.padding", ""))
    pad = -(len(added) + empty_pad) % 256
    added += kv("kvserve.test.padding", " " * pad)
    with open(dst, "wb") as f:
        f.write(struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + 2))
        f.write(added)
        f.write(data[24:])


def rss_bytes(pid):
    """Resident set size of process `pid` (VmRSS), in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def health_status(channel, service, timeout=5.0):
    """grpc.health.v1.Health/Check by hand-encoded bytes (the stub module would be named
    grpc.health..., which the installed grpc package shadows). 1 SERVING, 2 NOT_SERVING."""
    encoded = service.encode()
    request = (b"\x0a" + bytes([len(encoded)]) + encoded) if encoded else b""
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    response = call(request, timeout=timeout)
    # HealthCheckResponse{status = 1 (varint)}; an absent field is UNKNOWN (0).
    return response[1] if len(response) >= 2 and response[0] == 0x08 else 0
