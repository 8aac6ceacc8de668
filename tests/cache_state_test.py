"""A conversation's output does not depend on where its history's K/V came from: real
kvserve replicas and a real kvserve-cache on loopback, on both backends.

For each of several conversations (token-id prompts of stories260K) and each sampling
mode (greedy; seeded sampling at temperature 0.9 with top-p), the same three turns run
in four cache states, and turn 3 must give the same tokens and the same log-probabilities,
bit for bit:

- local: all three turns on replica A (turn 3's history is in A's KV pool);
- fetched right away: turns 1-2 on A, turn 3 on replica B at once, while A's write-behind
  may still be storing the blocks (B fetches what kvserve-cache has and prefills the rest:
  the state in which decode-computed and prefill-computed K/V used to round apart);
- fetched whole: the same after A's record and blocks are all in kvserve-cache;
- recomputed: one stateless request on replica C (no session cache) whose prompt is the
  whole history (from kvserve-cache's record) plus turn 3's ids.

Every conversation gets its own cache salt per state, so no state borrows another's blocks;
the conversations run in parallel threads so their steps share batches. Fails without
batch invariance (`--batch-invariant=false` makes the cpu_blas replicas differ: checked
by test_without_invariance_the_states_differ, so the comparison is known to be sharp).

Usage: /usr/bin/python3 cache_state_test.py KVSERVE_BIN CACHE_BIN MODEL PYTHON_STUBS_DIR
"""
import concurrent.futures
import sys
import time
import unittest

import grpc

KVSERVE, CACHE, MODEL, PYDIR = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402
from kvserve.v1 import session_cache_pb2 as cpb  # noqa: E402

CONVERSATIONS = 8
TURN_TOKENS = 24  # tokens generated per turn (ignore_eos: histories of a known length)
STATES = ("local", "fetched right away", "fetched whole", "recomputed")


def prompt_ids(conversation, turn):
    """Turn `turn`'s prompt ids: BOS first in turn 1, ids of ordinary pieces after."""
    n = 9 + 7 * turn + conversation % 5
    ids = [(conversation * 131 + turn * 71 + i * 37) % 480 + 30 for i in range(n)]
    return ([1] if turn == 0 else []) + ids


def request(ids, seed, sampled, session_id="", salt=""):
    sampling = pb.SamplingParams(temperature=0.9, top_p=0.95, seed=seed) if sampled else \
        pb.SamplingParams(temperature=0.0)
    r = pb.GenerateRequest(max_tokens=TURN_TOKENS, session_id=session_id, top_logprobs=3,
                           sampling=sampling, ignore_eos=True, cache_salt=salt)
    r.tokens.ids.extend(ids)
    return r


def outcome(response):
    """What must agree: the tokens and every log-probability, exactly."""
    return (list(response.token_ids),
            [(lp.token_id, lp.logprob, [(t.token_id, t.logprob) for t in lp.top])
             for lp in response.logprobs])


class CacheClient:
    def __init__(self, channel):
        self._get = channel.unary_unary(
            "/kvserve.v1.SessionCache/GetSession",
            request_serializer=cpb.GetSessionRecordRequest.SerializeToString,
            response_deserializer=cpb.SessionRecord.FromString)

    def record(self, session_id):
        return self._get(cpb.GetSessionRecordRequest(session_id=session_id), timeout=5)


class Cluster:
    """kvserve-cache, replicas A and B on it, C without it; all on `backend`."""

    def __init__(self, backend, extra=(), expect_fetch=True):
        self.backend = backend
        self.extra = list(extra)
        # Whether B must fetch a whole history (it may recompute instead when it estimates
        # that faster, as with sgemm prefill).
        self.expect_fetch = expect_fetch

    def __enter__(self):
        self.cache = lib.CacheProcess(CACHE, ["--memory-bytes", str(256 << 20)]).__enter__()
        args = ["--backend", self.backend, "--kv-budget-mib", "64"] + self.extra
        with_cache = args + ["--session-cache", self.cache.target(),
                             "--session-cache-timeout", "2s"]
        if self.expect_fetch:
            # B must fetch, not recompute a short history it estimates faster to prefill
            # (a tiny model on a loaded machine skipped it in CI).
            with_cache.append("--session-cache-always-fetch")
        self.replicas = [lib.KvserveProcess(KVSERVE, MODEL, with_cache).__enter__(),
                         lib.KvserveProcess(KVSERVE, MODEL, with_cache).__enter__(),
                         lib.KvserveProcess(KVSERVE, MODEL, args).__enter__()]
        self.channels = [grpc.insecure_channel(p.target()) for p in self.replicas]
        self.a, self.b, self.c = (lib.Inference(ch) for ch in self.channels)
        self.cache_channel = grpc.insecure_channel(self.cache.target())
        self.cache_client = CacheClient(self.cache_channel)
        return self

    def __exit__(self, *exc):
        for ch in self.channels + [self.cache_channel]:
            ch.close()
        for p in reversed(self.replicas):
            p.__exit__(*exc)
        self.cache.__exit__(*exc)


FETCH_ATTEMPTS = 4


def conversation_in_state(cluster, conversation, sampled, state):
    """Runs the three turns of `conversation` in `state`; returns turn 3's response.
    "fetched whole" must fetch: B skips a fetch it estimates slower than recomputing (a
    short history of a tiny model on a loaded machine), and then the conversation runs
    again in a new session with another salt (the salt moves the cache, not the output),
    up to FETCH_ATTEMPTS times."""
    if state != "fetched whole" or not cluster.expect_fetch:
        return run_conversation(cluster, conversation, sampled, state, "")
    for attempt in range(FETCH_ATTEMPTS):
        r = run_conversation(cluster, conversation, sampled, state, "-a%d" % attempt)
        if r.usage.cached_tokens_remote > 0:
            return r
    raise AssertionError("B recomputed the history in %d attempts: %s" % (FETCH_ATTEMPTS, r.usage))


def run_conversation(cluster, conversation, sampled, state, attempt):
    salt = "c%d-%s-%s%s" % (conversation, "s" if sampled else "g", state, attempt)
    seeds = [1000 + 10 * conversation + t for t in range(3)]
    if state == "recomputed":
        # The history as the other states built it: turns 1-2 in a session on A (own
        # salt), then its record's tokens as one stateless prompt on C.
        session = cluster.a.open_session(pb.OpenSessionRequest(), timeout=10).session_id
        for t in range(2):
            cluster.a.generate(request(prompt_ids(conversation, t), seeds[t], sampled, session,
                                       salt), timeout=60)
        lib.wait_for(lambda: len(cluster.cache_client.record(session).turn_ends) == 2,
                     what="turn 2's record")
        history = list(cluster.cache_client.record(session).tokens)
        r = cluster.c.generate(
            request(history + prompt_ids(conversation, 2), seeds[2], sampled, "", salt + "-c"),
            timeout=60)
        assert r.usage.cached_tokens_local == 0 and r.usage.cached_tokens_remote == 0, r.usage
        return r
    session = cluster.a.open_session(pb.OpenSessionRequest(), timeout=10).session_id
    for t in range(2):
        cluster.a.generate(request(prompt_ids(conversation, t), seeds[t], sampled, session, salt),
                           timeout=60)
    third = request(prompt_ids(conversation, 2), seeds[2], sampled, session, salt)
    if state == "local":
        r = cluster.a.generate(third, timeout=60)
        assert r.usage.cached_tokens_local > 0, r.usage
        return r
    if state == "fetched whole":
        # A's record, then its blocks: written behind on loopback in milliseconds, but a
        # loaded machine (ctest -j2 beside builds) has taken over a second. A pause, as
        # the test cannot name the blocks: they are chained from the conversation's salt.
        lib.wait_for(lambda: len(cluster.cache_client.record(session).turn_ends) == 2,
                     what="turn 2's record")
        time.sleep(3.0)
    return cluster.b.generate(third, timeout=60)


def run_states(cluster):
    """{(conversation, sampled): {state: outcome}} over every conversation, in parallel."""
    jobs = [(c, s, st) for c in range(CONVERSATIONS) for s in (False, True) for st in STATES]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {pool.submit(conversation_in_state, cluster, c, s, st): (c, s, st)
                   for c, s, st in jobs}
        for f in concurrent.futures.as_completed(futures):
            c, s, st = futures[f]
            results.setdefault((c, s), {})[st] = outcome(f.result())
    return results


class CacheStateTest(unittest.TestCase):

    def check_backend(self, backend):
        with Cluster(backend) as cluster:
            results = run_states(cluster)
        for (c, sampled), by_state in sorted(results.items()):
            want = by_state["local"]
            self.assertEqual(len(want[0]), TURN_TOKENS)
            for state in STATES[1:]:
                self.assertEqual(by_state[state], want,
                                 "conversation %d (%s), %s differs from local" %
                                 (c, "sampled" if sampled else "greedy", state))

    def test_cpu_blas(self):
        self.check_backend("cpu_blas")

    def test_reference(self):
        self.check_backend("reference")

    def test_without_invariance_the_states_differ(self):
        """The comparison is sharp: cpu_blas with --batch-invariant=false (prefill
        through OpenBLAS sgemm) gives some conversation different log-probabilities in
        some state."""
        with Cluster("cpu_blas", ["--batch-invariant=false"], expect_fetch=False) as cluster:
            results = run_states(cluster)
        differing = sum(1 for by_state in results.values()
                        for state in STATES[1:] if by_state[state] != by_state["local"])
        self.assertGreater(differing, 0)


if __name__ == "__main__":
    unittest.main()
