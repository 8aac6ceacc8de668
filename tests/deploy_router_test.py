"""HAProxy (Debian's /usr/sbin/haproxy) with deploy/haproxy/haproxy.cfg.

gRPC: in front of two real kvserve replicas sharing a real kvserve-cache: a session's turns,
sent with the metadata `kvserve-session-id`, all reach one replica (turns 2 and 3 find their
KV there); calls without it are spread over both; when a session's replica stops, its turns
move and still succeed.

HTTP (the OpenAI-compatible API): in front of two fake backends (http.server on loopback that
answer GET /health and say which backend answered): requests with one kvserve-session-id
header, one body session_id, one chat conversation (its first message, or its system message
and first user message) or one completions prompt prefix reach one backend; different keys
spread over both; keyless requests go round-robin; a body larger than HAProxy's buffer still
passes; a backend whose /health answers 503 gets no traffic, and its keys come back to it when
it is healthy again. With fake gRPC backends too, a session id reaches the same backend over
both protocols.

Usage: /usr/bin/python3 deploy_router_test.py KVSERVE_BIN CACHE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import concurrent.futures
import http.server
import json
import os
import subprocess
import sys
import threading
import unittest
import urllib.request
import uuid

import grpc

KVSERVE, CACHE, MODEL, PYDIR = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402
from kvserve.v1 import session_cache_pb2 as cpb  # noqa: E402

HAPROXY = "/usr/sbin/haproxy"
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "haproxy",
                      "haproxy.cfg")
SESSION_HEADER = "kvserve-session-id"
TURNS = ["Once upon a time, there was a little girl named Lily.", " She saw a big dog.",
         " The dog was happy."]


class Router:
    """HAProxy running deploy/haproxy/haproxy.cfg on free loopback ports: gRPC in front of
    `replicas`, HTTP in front of `http_backends` (each with .target(); a replica list may
    be None: those servers point at a closed port and are down)."""

    def __init__(self, replicas=None, http_backends=None):
        self.port = lib.free_port()
        self.http_port = lib.free_port()
        closed = "127.0.0.1:%d" % lib.free_port()
        grpc_targets = [r.target() for r in replicas] if replicas else [closed, closed]
        http_targets = [b.target() for b in http_backends] if http_backends else [closed,
                                                                                  closed]
        self.env = dict(os.environ, ROUTER_LISTEN="127.0.0.1:%d" % self.port,
                        ROUTER_HTTP_LISTEN="127.0.0.1:%d" % self.http_port,
                        KVSERVE_1=grpc_targets[0], KVSERVE_2=grpc_targets[1],
                        KVSERVE_HTTP_1=http_targets[0], KVSERVE_HTTP_2=http_targets[1])

    def __enter__(self):
        check = subprocess.run([HAPROXY, "-c", "-f", CONFIG], env=self.env, capture_output=True,
                               text=True, timeout=30)
        if check.returncode != 0:
            raise AssertionError("haproxy -c: " + check.stdout + check.stderr)
        # -db: foreground, logs to stdout.
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", CONFIG], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def target(self):
        return "127.0.0.1:%d" % self.port

    def http_url(self, path):
        return "http://127.0.0.1:%d%s" % (self.http_port, path)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class FakeHttpBackend:
    """Stands in for a kvserve replica's HTTP listener on a free loopback port: GET /health
    answers `health` (200 ready, 503 loading/draining, as kvserve); any other request is
    counted in `served` (its body's size in `last_body_bytes`) and answered 200
    {"backend": NAME}. Use as a context manager."""

    def __init__(self, name):
        self.name = name
        self.health = 200
        self.served = 0
        self.last_body_bytes = 0
        self.lock = threading.Lock()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                self.answer()

            def do_POST(self):
                self.answer()

            def answer(self):
                body_bytes = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if self.path == "/health":
                    status = backend.health
                    body = {"status": "ok" if status == 200 else "draining"}
                else:
                    with backend.lock:
                        backend.served += 1
                        backend.last_body_bytes = body_bytes
                    status, body = 200, {"backend": backend.name}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # HAProxy ends its health checks with a reset

        self.server = Server(("127.0.0.1", 0), Handler)

    def target(self):
        return "127.0.0.1:%d" % self.server.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeGrpcBackend:
    """Stands in for a kvserve replica's gRPC port: any call of fake.Backend/Name answers the
    backend's name (raw bytes). Use as a context manager."""

    def __init__(self, name):
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        answer = grpc.unary_unary_rpc_method_handler(lambda request, context: name.encode())
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("fake.Backend", {"Name": answer}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def target(self):
        return "127.0.0.1:%d" % self.port

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(0)


def chat_turns(first, system=None):
    """The request bodies of a three-turn chat: each turn resends the history."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": first}]
    turns = []
    for i in range(3):
        turns.append({"model": "m", "messages": list(messages), "max_tokens": 8})
        messages += [{"role": "assistant", "content": "Answer %d." % i},
                     {"role": "user", "content": "And then %d?" % i}]
    return turns


# Each kind of affinity key: key -> the (path, body, session header or None) of a
# conversation's three turns.
HTTP_CONVERSATIONS = {
    # The header wins over everything in the body (each turn's first message differs).
    "session header": lambda key: [
        ("/v1/chat/completions", chat_turns("Turn %d." % i)[0], key) for i in range(3)],
    "body session_id": lambda key: [
        ("/v1/chat/completions", dict(chat_turns("Turn %d." % i)[0], session_id=key), None)
        for i in range(3)],
    "first message": lambda key: [
        ("/v1/chat/completions", body, None) for body in chat_turns("Tell me about %s." % key)],
    "first message as text parts": lambda key: [
        ("/v1/chat/completions", body, None)
        for body in chat_turns([{"type": "text", "text": "Tell me about %s." % key}])],
    # One system prompt for every conversation: the first user message tells them apart.
    "system prompt and first message": lambda key: [
        ("/v1/chat/completions", body, None)
        for body in chat_turns("Tell me about %s." % key, system="You tell short stories.")],
    "system prompt and first message as text parts": lambda key: [
        ("/v1/chat/completions", body, None)
        for body in chat_turns([{"type": "text", "text": "Tell me about %s." % key}],
                               system=[{"type": "text", "text": "You tell short stories."}])],
    # Each turn extends the previous prompt (its first 128 bytes are the key).
    "completions prompt prefix": lambda key: [
        ("/v1/completions", {"model": "m", "prompt": ("Once upon a time %s" % key).ljust(
            128, ".") + " And then." * i, "max_tokens": 8}, None) for i in range(3)],
}
KEYS_PER_KIND = 16


class HttpRouterTest(unittest.TestCase):

    def send(self, router, path, body=None, session=None):
        """The name of the backend that answered a request through the router."""
        headers = {"Content-Type": "application/json"}
        if session:
            headers[SESSION_HEADER] = session
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(router.http_url(path), data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)["backend"]

    def owner(self, router, turns):
        """The one backend every turn of a conversation reached (asserts there is one)."""
        answered = [self.send(router, *turn) for turn in turns]
        self.assertEqual(len(set(answered)), 1, "turns went to %r: %r" % (answered, turns[0]))
        return answered[0]

    def test_http_affinity_spread_and_health(self):
        with FakeHttpBackend("a") as a, FakeHttpBackend("b") as b, \
                Router(http_backends=[a, b]) as router:
            # Keyless requests go round-robin: both backends answer (retried while HAProxy
            # starts).
            seen = set()

            def both_seen():
                seen.add(self.send(router, "/v1/models"))
                return seen == {"a", "b"}
            lib.poll(both_seen, 30, "GET /v1/models answered by both backends")

            owners = {}  # (kind, key) -> backend
            for kind, conversation in HTTP_CONVERSATIONS.items():
                spread = set()
                for _ in range(KEYS_PER_KIND):
                    key = uuid.uuid4().hex
                    owners[(kind, key)] = self.owner(router, conversation(key))
                    spread.add(owners[(kind, key)])
                self.assertEqual(spread, {"a", "b"}, "%s: %d keys all on one backend" %
                                 (kind, KEYS_PER_KIND))
            # A first message larger than HAProxy's buffer (no key: round-robin) is forwarded
            # whole (kvserve takes bodies up to --max-message-bytes).
            big = chat_turns("x" * (256 << 10))[0]
            answered = {"a": a, "b": b}[self.send(router, "/v1/chat/completions", big)]
            self.assertEqual(answered.last_body_bytes, len(json.dumps(big).encode()))

            # b's /health answers 503 (draining): once HAProxy sees it, no request reaches b,
            # and b's conversations continue on a.
            b.health = 503
            on_b = [k for k, o in owners.items() if o == "b"]

            def b_out():
                return all(self.send(router, *HTTP_CONVERSATIONS[kind](key)[0]) == "a"
                           for kind, key in on_b)
            lib.poll(b_out, 30, "b's conversations moved to a")
            served = b.served
            for kind, key in owners:
                self.assertEqual(self.owner(router, HTTP_CONVERSATIONS[kind](key)), "a")
            for _ in range(4):
                self.assertEqual(self.send(router, "/v1/models"), "a")
            self.assertEqual(b.served, served, "a backend answering 503 on /health got traffic")

            # Healthy again: the consistent hash gives b back exactly its conversations.
            b.health = 200

            def b_back():
                return all(self.send(router, *HTTP_CONVERSATIONS[kind](key)[0]) == "b"
                           for kind, key in on_b)
            lib.poll(b_back, 30, "b's conversations back on b")
            for (kind, key), backend in owners.items():
                self.assertEqual(self.owner(router, HTTP_CONVERSATIONS[kind](key)), backend)

    def test_a_session_id_reaches_one_replica_over_grpc_and_http(self):
        with FakeGrpcBackend("a") as ga, FakeGrpcBackend("b") as gb, \
                FakeHttpBackend("a") as a, FakeHttpBackend("b") as b, \
                Router(replicas=[ga, gb], http_backends=[a, b]) as router, \
                grpc.insecure_channel(router.target()) as channel:
            name = channel.unary_unary("/fake.Backend/Name")

            def over_grpc(key):
                return name(b"", timeout=10, metadata=[(SESSION_HEADER, key)]).decode()

            def over_http(key):
                return self.send(router, "/v1/chat/completions", chat_turns("Hi.")[0], key)

            keys = [uuid.uuid4().hex for _ in range(KEYS_PER_KIND)]
            # Until HAProxy has both backends of each protocol up, a key may land elsewhere.
            lib.poll(lambda: {over_grpc(k) for k in keys} == {over_http(k) for k in keys}
                     == {"a", "b"}, 30, "both backends of each protocol answering")
            for key in keys:
                self.assertEqual(over_grpc(key), over_http(key), key)


class RouterTest(unittest.TestCase):

    def rpc_count(self, replica, method):
        return lib.metric_value(lib.scrape(replica.metrics_port), "kvserve_rpc_requests_total",
                                {"method": method})

    def which_replica(self, replicas, method, call):
        """Runs call() and returns (its result, the index of the one replica that counted it)."""
        before = [self.rpc_count(r, method) for r in replicas]
        result = call()
        after = [self.rpc_count(r, method) for r in replicas]
        moved = [i for i in range(len(replicas)) if after[i] != before[i]]
        self.assertEqual(len(moved), 1, "one %s counted on %r replicas" % (method, moved))
        self.assertEqual(after[moved[0]] - before[moved[0]], 1)
        return result, moved[0]

    def test_session_turns_stay_on_one_replica_and_move_when_it_stops(self):
        with lib.CacheProcess(CACHE) as cache, \
                lib.KvserveProcess(KVSERVE, MODEL, ["--kv-budget-mib", "64", "--session-cache",
                                                    cache.target()]) as r1, \
                lib.KvserveProcess(KVSERVE, MODEL, ["--kv-budget-mib", "64", "--session-cache",
                                                    cache.target()]) as r2, \
                Router([r1, r2]) as router, \
                grpc.insecure_channel(router.target()) as channel, \
                grpc.insecure_channel(cache.target()) as cache_channel:
            replicas = [r1, r2]
            api = lib.Inference(channel)
            generate, open_session, info = api.generate, api.open_session, api.get_model_info
            cache_get = cache_channel.unary_unary(
                "/kvserve.v1.SessionCache/GetSession",
                request_serializer=cpb.GetSessionRecordRequest.SerializeToString,
                response_deserializer=cpb.SessionRecord.FromString)
            # Without the header: round-robin, both replicas answer (retried while HAProxy
            # still starts or checks them).
            seen = set()

            def both_seen():
                seen.add(self.which_replica(
                    replicas, "GetModelInfo",
                    lambda: info(pb.GetModelInfoRequest(), timeout=10))[1])
                return seen == {0, 1}
            lib.poll(both_seen, 30, "GetModelInfo answered by both replicas")

            def turn(session_id, text):
                request = pb.GenerateRequest(text=text, session_id=session_id, max_tokens=8,
                                             sampling=pb.SamplingParams(temperature=0.0))
                return generate(request, timeout=30, metadata=[(SESSION_HEADER, session_id)])

            # Sessions until both replicas own at least one (random ids: bounded attempts).
            owner_of = {}
            opened_on = {}
            for _ in range(24):
                session, opener = self.which_replica(
                    replicas, "OpenSession", lambda: open_session(pb.OpenSessionRequest(),
                                                                  timeout=10))
                session_id = session.session_id
                opened_on[session_id] = opener
                # OpenSession may land on either replica; the record reaches the cache
                # behind, and the first turn may continue it on the other one.
                lib.poll(lambda: cache_get(cpb.GetSessionRecordRequest(session_id=session_id),
                                        timeout=5), 20, "the session record in kvserve-cache")
                owners = []
                for i, text in enumerate(TURNS):
                    response, owner = self.which_replica(replicas, "Generate",
                                                         lambda: turn(session_id, text))
                    owners.append(owner)
                    self.assertGreater(len(response.token_ids), 0)
                    if i > 0:  # the previous turn's KV is on this replica
                        self.assertGreater(response.usage.cached_tokens_local, 0)
                        self.assertEqual(response.usage.cached_tokens_remote, 0)
                self.assertEqual(len(set(owners)), 1, "turns of %s went to %r" %
                                 (session_id, owners))
                owner_of[session_id] = owners[0]
                if set(owner_of.values()) == {0, 1}:
                    break
            self.assertEqual(set(owner_of.values()), {0, 1}, owner_of)

            # Stop one replica: its sessions move to the other one and continue.
            stopped = 0
            self.assertEqual(r1.terminate_and_wait(), 0)
            moved = [s for s, o in owner_of.items() if o == stopped]
            for session_id in moved:
                response = lib.poll(lambda: turn(session_id, " Then it rained."), 30,
                                 "a turn of %s after its replica stopped" % session_id)
                self.assertGreater(len(response.token_ids), 0)
                # Its history came back from kvserve-cache, also when the session was
                # opened on the surviving replica (whose own copy from OpenSession is empty:
                # the record has more turns, so the record wins).
                self.assertGreater(response.usage.prompt_tokens, 20,
                                   "opened on replica %d" % opened_on[session_id])
            kept = [s for s, o in owner_of.items() if o != stopped]
            for session_id in kept:
                self.which_replica([r2], "Generate", lambda: turn(session_id, " It was sunny."))


if __name__ == "__main__":
    lib.main(170)
