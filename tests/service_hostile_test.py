"""The real `kvserve` binary against what reaches its ports from outside (issue "Fix first").

- The metrics port answers every HTTP method, path and malformed request with a status and
  keeps serving /metrics; 20 connections that never finish their request line do not
  block a scrape (< 2 s).
- Session ids: 128 bits from the OS's secure source; two fresh servers, with the same or
  a different --seed, never hand out the same ids.
- An HTTP/2 reset burst (raw frames with Debian's python3-h2: 20,000 streams opened and
  reset on one connection, five times) leaves RSS within the configured gRPC memory quota
  plus a stated margin, and the server keeps answering.
- Session RPCs bound the id they echo; an empty turn continues a session with history;
  an unparsable request gets the status the proto documents; a second SIGTERM ends the
  drain at once.

Usage: /usr/bin/python3 service_hostile_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import os
import re
import signal
import socket
import sys
import time
import unittest

import grpc
import h2.config
import h2.connection
import h2.events

KVSERVE, MODEL, PYDIR = sys.argv[1:4]
del sys.argv[1:4]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402

STATUS_RE = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")


def http_exchange(port, data, timeout=5.0):
    """Sends raw bytes, returns all bytes received until the server closes (or timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may answer and close before reading everything
        chunks = []
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def http_status(port, data):
    reply = http_exchange(port, data)
    m = STATUS_RE.match(reply)
    return int(m.group(1)) if m else None, reply


def request(method, path, body=b""):
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if body:
        head += "Content-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def stub(channel, name, request_type, response_type, streaming=False):
    factory = channel.unary_stream if streaming else channel.unary_unary
    return factory("/kvserve.v1.Inference/" + name,
                   request_serializer=request_type.SerializeToString,
                   response_deserializer=response_type.FromString)


class MetricsPortTest(unittest.TestCase):
    def test_every_request_gets_a_status_and_the_server_lives(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            port = server.metrics_port
            cases = [
                ("GET /", request("GET", "/"), 404),
                ("HEAD /metrics", request("HEAD", "/metrics"), 200),
                ("POST with a body", request("POST", "/metrics", b"x" * 10000), 405),
                ("PUT", request("PUT", "/metrics", b"a=1"), 405),
                ("DELETE", request("DELETE", "/metrics"), 405),
                ("OPTIONS", request("OPTIONS", "/metrics"), 405),
                ("64 KB URL", request("GET", "/" + "a" * 65536), None),
                ("a request line without a version", b"a b\n\n", 400),
                ("random bytes", os.urandom(4096) + b"\r\n\r\n", "4xx or close"),
            ]
            for name, data, expected in cases:
                status, reply = http_status(port, data)
                if expected == "4xx or close":
                    # Bytes with no request line at all (no method, no path): libmicrohttpd
                    # 0.9.75 closes the connection without a reply; a 4xx is fine too.
                    self.assertTrue(reply == b"" or (status is not None and 400 <= status < 500),
                                    "%s: %r" % (name, reply[:200]))
                elif expected is None:
                    self.assertIsNotNone(status, "%s: no HTTP status in %r" % (name, reply[:200]))
                    self.assertGreaterEqual(status, 400, name)
                    self.assertLess(status, 500, name)
                else:
                    self.assertEqual(status, expected, "%s: %r" % (name, reply[:200]))
                self.assertIsNone(server.proc.poll(), "kvserve died after " + name)
            status, reply = http_status(port, request("GET", "/metrics"))
            self.assertEqual(status, 200)
            self.assertIn(b"kvserve_request_finished_total", reply)

    def test_stalled_connections_do_not_block_a_scrape(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            stalled = []
            try:
                for _ in range(20):
                    s = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=5)
                    s.sendall(b"GET /metrics HTTP/1.1\r\n")
                    stalled.append(s)
                start = time.monotonic()
                status, _ = http_status(server.metrics_port, request("GET", "/metrics"))
                elapsed = time.monotonic() - start
                self.assertEqual(status, 200)
                self.assertLess(elapsed, 2.0)
            finally:
                for s in stalled:
                    s.close()


class SessionIdTest(unittest.TestCase):
    def first_ids(self, extra_args, count=3):
        with lib.KvserveProcess(KVSERVE, MODEL, extra_args) as server:
            with grpc.insecure_channel(server.target()) as channel:
                open_session = stub(channel, "OpenSession", pb.OpenSessionRequest, pb.Session)
                return [open_session(pb.OpenSessionRequest(), timeout=10).session_id
                        for _ in range(count)]

    def test_ids_are_128_bit_and_independent_of_seed_and_restarts(self):
        runs = [self.first_ids([]), self.first_ids([]), self.first_ids(["--seed", "42"])]
        all_ids = [i for run in runs for i in run]
        for session_id in all_ids:
            self.assertRegex(session_id, r"^s-[0-9a-f]{32}$")
        self.assertEqual(len(set(all_ids)), len(all_ids), all_ids)
        # The id every pre-fix server handed out first.
        self.assertNotIn("s-9f5911fb5caa61d3f7e148110725b747", all_ids)


class SessionRpcTest(unittest.TestCase):
    def test_long_ids_empty_turns_and_unparsable_requests(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            with grpc.insecure_channel(server.target()) as channel:
                get = stub(channel, "GetSession", pb.GetSessionRequest, pb.Session)
                close = stub(channel, "CloseSession", pb.CloseSessionRequest,
                             pb.CloseSessionResponse)
                fork = stub(channel, "ForkSession", pb.ForkSessionRequest, pb.Session)
                huge = "s-" + "a" * (1 << 20)
                for call, req in ((get, pb.GetSessionRequest(session_id=huge)),
                                  (close, pb.CloseSessionRequest(session_id=huge)),
                                  (fork, pb.ForkSessionRequest(parent_session_id=huge))):
                    with self.assertRaises(grpc.RpcError) as err:
                        call(req, timeout=10)
                    self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertLess(len(err.exception.details()), 200)
                    self.assertIn("at most 128", err.exception.details())

                # An empty turn on a session with history continues it (the proto says so).
                open_session = stub(channel, "OpenSession", pb.OpenSessionRequest, pb.Session)
                generate = stub(channel, "Generate", pb.GenerateRequest, pb.GenerateResponse)
                sid = open_session(pb.OpenSessionRequest(), timeout=10).session_id
                empty = pb.GenerateRequest(session_id=sid, max_tokens=8)
                empty.sampling.temperature = 0
                with self.assertRaises(grpc.RpcError) as err:  # no history yet
                    generate(empty, timeout=10)
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertNotIn("prompt_tokens", err.exception.details())
                first = pb.GenerateRequest(text="Once upon a time", session_id=sid, max_tokens=8)
                first.sampling.temperature = 0
                turn1 = generate(first, timeout=10)
                reply = generate(empty, timeout=10)
                self.assertEqual(reply.usage.completion_tokens, 8)
                self.assertEqual(reply.usage.prompt_tokens,
                                 turn1.usage.prompt_tokens + turn1.usage.completion_tokens)

                # Bytes that are not a GenerateRequest: gRPC's callback API itself answers
                # UNIMPLEMENTED with an empty message (documented in inference.proto).
                raw = channel.unary_unary("/kvserve.v1.Inference/Generate",
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
                with self.assertRaises(grpc.RpcError) as err:
                    raw(b"\xff\xff\xff\xff", timeout=10)
                self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
                self.assertIsNone(server.proc.poll())


class ResetBurstTest(unittest.TestCase):
    QUOTA_MIB = 64
    STREAMS = 20000
    BURSTS = 5
    # What gRPC does not account to its quota (thread stacks, the model, allocator
    # slack) may come on top: the stated margin is 128 MiB over idle RSS plus the quota.
    MARGIN = 128 << 20
    # RSS must be back within the limit this long after a burst (the server trims the
    # heap every --malloc-trim-interval, 2 s by default, once it has worked through the
    # burst's resets). Alone a burst settles within 2-3 s, 20-27 MiB over idle RSS;
    # under `ctest -j2` beside other suites one burst was still at 778 MiB (limit 733)
    # when a 6 s window ended, so the window is 20 s: a server that keeps the memory
    # still fails, only later.
    SETTLE_SECONDS = 20

    def burst(self, port):
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(conn.data_to_send())
            headers = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                       (":path", "/kvserve.v1.Inference/GenerateStream"),
                       ("content-type", "application/grpc"), ("te", "trailers")]
            for i in range(self.STREAMS):
                stream_id = 1 + 2 * i
                conn.send_headers(stream_id, headers)
                conn.reset_stream(stream_id)
                if i % 200 == 199:
                    s.sendall(conn.data_to_send())
            s.sendall(conn.data_to_send())
            time.sleep(0.2)

    def settled_rss(self, pid, limit):
        """(RSS, seconds waited) once RSS is below `limit`, or the last reading after
        SETTLE_SECONDS."""
        start = time.monotonic()
        while True:
            rss = lib.rss_bytes(pid)
            waited = time.monotonic() - start
            if rss < limit or waited > self.SETTLE_SECONDS:
                return rss, waited
            time.sleep(0.2)

    def test_reset_bursts_leave_rss_within_quota_and_margin(self):
        args = ["--grpc-memory-quota-mib", str(self.QUOTA_MIB)]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            pid = server.proc.pid
            with grpc.insecure_channel(server.target()) as channel:
                info = stub(channel, "GetModelInfo", pb.GetModelInfoRequest, pb.ModelInfo)
                info(pb.GetModelInfoRequest(), timeout=10)
                idle = lib.rss_bytes(pid)
                limit = idle + (self.QUOTA_MIB << 20) + self.MARGIN
                peak = idle
                for n in range(self.BURSTS):
                    self.burst(server.port)
                    peak = max(peak, lib.rss_bytes(pid))
                    after, waited = self.settled_rss(pid, limit)
                    print("reset burst %d: idle RSS %.0f MiB, peak so far %.0f MiB, settled "
                          "%.0f MiB after %.1f s, limit %.0f MiB" %
                          (n, idle / 2**20, peak / 2**20, after / 2**20, waited, limit / 2**20))
                    self.assertLess(after, limit)
                self.assertIsNone(server.proc.poll())
                info(pb.GetModelInfoRequest(), timeout=10)  # still serving


class SecondSignalTest(unittest.TestCase):
    # 200 requests of ~500 tokens on the scalar backend, one at a time: about 100k
    # tokens, tens of seconds of work that a 120 s grace period would wait for.
    REQUESTS = 200

    def test_second_sigterm_ends_the_drain_now(self):
        args = ["--drain-grace", "120s", "--backend", "reference", "--max-running", "1"]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            with grpc.insecure_channel(server.target()) as channel:
                stream = stub(channel, "GenerateStream", pb.GenerateRequest,
                              pb.GenerateStreamResponse, streaming=True)
                req = pb.GenerateRequest(text="Once upon a time", max_tokens=4096,
                                         ignore_eos=True)
                # The first call alone, until it runs (with --max-running 1 a call sent
                # together with the others could wait behind all of them), then the rest.
                calls = [stream(req, timeout=300)]
                next(calls[0])
                calls += [stream(req, timeout=300) for _ in range(self.REQUESTS - 1)]
                server.proc.send_signal(signal.SIGTERM)
                server.wait_for_line("draining", 10)
                time.sleep(0.5)
                self.assertIsNone(server.proc.poll(), "the drain should still be waiting")
                start = time.monotonic()
                server.proc.send_signal(signal.SIGTERM)
                self.assertEqual(server.proc.wait(timeout=30), 0)
                self.assertLess(time.monotonic() - start, 10)
                self.assertTrue(any("second signal" in l for l in server.lines), server.lines)
                codes = set()
                for call in calls:
                    try:
                        for _ in call:
                            pass
                    except grpc.RpcError:
                        pass
                    codes.add(call.code())
                self.assertTrue(codes - {grpc.StatusCode.OK}, codes)


if __name__ == "__main__":
    lib.main(280)
