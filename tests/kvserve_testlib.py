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


def add_python_stubs(pydir):
    """Makes the protoc --python_out modules (kvserve.v1.inference_pb2) importable."""
    if pydir not in sys.path:
        sys.path.insert(0, pydir)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KvserveProcess:
    """A `kvserve` subprocess. Use as a context manager."""

    LISTEN_RE = re.compile(r"listening on \S+ \(port (\d+)\), metrics on \S* \(port (\d+)\)")

    def __init__(self, binary, model, extra_args=(), timeout=30.0):
        self.args = [binary, "--model", model, "--listen", "127.0.0.1:0",
                     "--metrics-listen", "127.0.0.1:0", "--threads", "1"] + list(extra_args)
        self.timeout = timeout
        self.proc = None
        self.port = None
        self.metrics_port = None
        self.lines = []
        self._cv = threading.Condition()
        self._eof = False

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_for_line("ready", self.timeout)
        for line in self.lines:
            m = self.LISTEN_RE.search(line)
            if m:
                self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
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

    def terminate_and_wait(self, timeout=30.0):
        """Sends SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc.stdout.close()


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
