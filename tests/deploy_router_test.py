"""HAProxy (Debian's /usr/sbin/haproxy) with deploy/haproxy/haproxy.cfg in front of two real
kvserve replicas sharing a real kvserve-cache: a session's turns, sent with the metadata
`kvserve-session-id`, all reach one replica (turns 2 and 3 find their KV there); calls without
it are spread over both; when a session's replica stops, its turns move and still succeed.

Usage: /usr/bin/python3 deploy_router_test.py KVSERVE_BIN CACHE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import os
import subprocess
import sys
import unittest

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
    """HAProxy running deploy/haproxy/haproxy.cfg on a free loopback port."""

    def __init__(self, replicas):
        self.port = lib.free_port()
        self.env = dict(os.environ, ROUTER_LISTEN="127.0.0.1:%d" % self.port,
                        KVSERVE_1=replicas[0].target(), KVSERVE_2=replicas[1].target())

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

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


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
