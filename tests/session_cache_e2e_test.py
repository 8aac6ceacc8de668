"""Conversations that outlive a replica: real kvserve replicas and a real kvserve-cache
(memory, disk and Redis tiers) on loopback.

- A session turned on replica A continues on replica B with its history fetched
  (cached_tokens_remote > 0), with the tokens and top logprobs of a cold run of the whole
  context (logprobs equal up to the rounding of a differently blocked prefill).
- A session opened on B (which keeps an empty copy) and turned on A: B's next turn
  continues the newer record in kvserve-cache, with the whole history, as a cold run.
- A replica restarted between turns reuses the prefix remotely; a kvserve-cache with a
  disk tier restarted between turns still has its blocks and session records: a fresh
  replica continues the session by id.
- The Redis backend against a real redis-server.
- kvserve-cache killed during traffic: every request succeeds; restarted, reuse resumes.
- Bearer tokens: a replica with the right token file reuses; calls without one get
  UNAUTHENTICATED.

Usage: /usr/bin/python3 session_cache_e2e_test.py KVSERVE_BIN CACHE_BIN MODEL PYTHON_STUBS_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

KVSERVE, CACHE, MODEL, PYDIR = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402
from kvserve.v1 import session_cache_pb2 as cpb  # noqa: E402

FIRST = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
         "in the sun with her big red ball. One day, she went to the park with her mom.")
SECOND = " Then she saw a big dog."


def replica(cache=None, extra=()):
    # A small pool: stories260K needs little, and every replica makes its pool resident.
    args = ["--kv-budget-mib", "64"] + list(extra)
    if cache is not None:
        args += ["--session-cache", cache.target(), "--session-cache-timeout", "2s"]
    return lib.KvserveProcess(KVSERVE, MODEL, args)


Inference = lib.Inference


class Cache:
    def __init__(self, channel, token=None):
        u = channel.unary_unary
        self.metadata = [("authorization", "Bearer " + token)] if token else None
        self._get_session = u("/kvserve.v1.SessionCache/GetSession",
                              request_serializer=cpb.GetSessionRecordRequest.SerializeToString,
                              response_deserializer=cpb.SessionRecord.FromString)
        self._stats = u("/kvserve.v1.SessionCache/GetStats",
                        request_serializer=cpb.GetStatsRequest.SerializeToString,
                        response_deserializer=cpb.CacheStats.FromString)

    def get_session(self, session_id):
        return self._get_session(cpb.GetSessionRecordRequest(session_id=session_id), timeout=5,
                                 metadata=self.metadata)

    def stats(self):
        return self._stats(cpb.GetStatsRequest(), timeout=5, metadata=self.metadata)


def greedy(max_tokens, text=None, ids=None, session_id=""):
    r = pb.GenerateRequest(max_tokens=max_tokens, session_id=session_id, top_logprobs=3,
                           sampling=pb.SamplingParams(temperature=0.0))
    if ids is not None:
        r.tokens.ids.extend(ids)
    else:
        r.text = text
    return r


class SessionCacheEndToEndTest(unittest.TestCase):

    def first_turn(self, server, cache_client):
        """Opens a session on `server`, runs turn 1, waits until its record and blocks
        are in the cache. Returns (session id, history token ids)."""
        with grpc.insecure_channel(server.target()) as ch:
            api = Inference(ch)
            session = api.open_session(pb.OpenSessionRequest(), timeout=10)
            first = api.generate(greedy(60, text=FIRST, session_id=session.session_id),
                                 timeout=60)
            history_len = first.usage.prompt_tokens + first.usage.completion_tokens
        lib.wait_for(lambda: len(cache_client.get_session(session.session_id).tokens) == history_len,
                 what="the session record")
        record = cache_client.get_session(session.session_id)
        self.assertEqual(list(record.turn_ends), [history_len])
        lib.wait_for(lambda: cache_client.stats().blocks >= history_len // 16, what="the blocks")
        return session.session_id, list(record.tokens)

    def assert_cold_equal(self, got, context_ids, max_tokens):
        """`got` equals a cold run of the whole context on a replica without a cache."""
        with replica() as cold_server, grpc.insecure_channel(cold_server.target()) as ch:
            cold = Inference(ch).generate(greedy(max_tokens, ids=context_ids), timeout=60)
        self.assertEqual(list(got.token_ids), list(cold.token_ids))
        self.assertEqual(len(got.logprobs), len(cold.logprobs))
        for a, b in zip(got.logprobs, cold.logprobs):
            self.assertEqual(a.token_id, b.token_id)
            self.assertAlmostEqual(a.logprob, b.logprob, delta=1e-4)
            self.assertEqual([t.token_id for t in a.top], [t.token_id for t in b.top])
            for x, y in zip(a.top, b.top):
                self.assertAlmostEqual(x.logprob, y.logprob, delta=1e-4)

    def test_session_continues_on_another_replica(self):
        with lib.CacheProcess(CACHE, ["--memory-bytes", str(256 << 20)]) as cache, \
                grpc.insecure_channel(cache.target()) as cch:
            cache_client = Cache(cch)
            with replica(cache) as a, replica(cache) as b:
                session_id, history = self.first_turn(a, cache_client)
                with grpc.insecure_channel(b.target()) as ch:
                    got = Inference(ch).generate(
                        greedy(40, text=SECOND, session_id=session_id), timeout=60)
                self.assertEqual(got.usage.cached_tokens_remote, len(history) // 16 * 16)
                self.assertEqual(got.usage.cached_tokens_local, 0)
                second_ids = got.usage.prompt_tokens - len(history)
                self.assertGreater(second_ids, 0)
                # The turn's context: the history, then the new text's ids (from B's record).
                lib.wait_for(lambda: len(cache_client.get_session(session_id).turn_ends) == 2,
                         what="turn 2's record")
                record = cache_client.get_session(session_id)
                context = list(record.tokens)[:got.usage.prompt_tokens]
                self.assertEqual(context[:len(history)], history)
            self.assert_cold_equal(got, context, 40)

    def test_stateless_http_chat_reuses_the_conversation_on_another_replica(self):
        """The OpenAI API's way to hold a conversation: every request sends the whole of
        it. Turn 2 repeats turn 1's messages and reply: on the same replica its prefix comes
        from the local cache, on another replica from kvserve-cache; both report it as
        usage.prompt_tokens_details.cached_tokens."""
        def chat(server, messages):
            body = json.dumps({"model": "stories260K", "messages": messages, "max_tokens": 24,
                               "temperature": 0}).encode()
            request = urllib.request.Request(
                "http://127.0.0.1:%d/v1/chat/completions" % server.http_port, data=body,
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as r:
                return json.load(r)

        with lib.CacheProcess(CACHE, ["--memory-bytes", str(256 << 20)]) as cache, \
                grpc.insecure_channel(cache.target()) as cch:
            chatml = ["--chat-template", "chatml"]
            with replica(cache, chatml) as a, replica(cache, chatml) as b:
                turn1 = [{"role": "system", "content": "You tell stories."},
                         {"role": "user", "content": FIRST}]
                first = chat(a, turn1)
                self.assertEqual(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
                prompt1 = first["usage"]["prompt_tokens"]
                # Turn 1's prompt blocks reach kvserve-cache (written behind).
                lib.wait_for(lambda: Cache(cch).stats().blocks >= prompt1 // 16,
                             what="turn 1's blocks in kvserve-cache")
                turn2 = turn1 + [{"role": "assistant",
                                  "content": first["choices"][0]["message"]["content"]},
                                 {"role": "user", "content": SECOND}]
                # B has never seen the conversation: its prefix comes from kvserve-cache.
                remote = chat(b, turn2)
                self.assertGreaterEqual(remote["usage"]["prompt_tokens_details"]["cached_tokens"],
                                        prompt1 // 16 * 16)
                self.assertGreater(lib.metric_value(lib.scrape(b.metrics_port),
                                                    "kvserve_request_cached_tokens_total",
                                                    {"source": "remote"}), 0)
                # A still has it locally.
                local = chat(a, turn2)
                self.assertGreaterEqual(local["usage"]["prompt_tokens_details"]["cached_tokens"],
                                        prompt1 // 16 * 16)
                self.assertEqual(local["usage"]["prompt_tokens"], remote["usage"]["prompt_tokens"])

    def test_opener_continues_the_newer_record(self):
        """Opened on B, three turns on A: B's next turn starts from the whole history in
        kvserve-cache (not B's empty copy) and answers as a cold run of it."""
        with lib.CacheProcess(CACHE, ["--memory-bytes", str(256 << 20)]) as cache, \
                grpc.insecure_channel(cache.target()) as cch:
            cache_client = Cache(cch)
            with replica(cache) as a, replica(cache) as b, \
                    grpc.insecure_channel(a.target()) as ach, \
                    grpc.insecure_channel(b.target()) as bch:
                session_id = Inference(bch).open_session(pb.OpenSessionRequest(),
                                                         timeout=10).session_id
                lib.wait_for(lambda: cache_client.get_session(session_id) is not None,
                             what="the opened session's record")
                for text in (FIRST, " She had a big red ball.", " The sun was warm."):
                    Inference(ach).generate(greedy(12, text=text, session_id=session_id),
                                            timeout=60)
                lib.wait_for(lambda: len(cache_client.get_session(session_id).turn_ends) == 3,
                             what="turn 3's record")
                history = list(cache_client.get_session(session_id).tokens)
                lib.wait_for(lambda: cache_client.stats().blocks >= len(history) // 16,
                             what="the history's blocks")
                got = Inference(bch).generate(greedy(20, text=SECOND, session_id=session_id),
                                              timeout=60)
                self.assertGreater(got.usage.prompt_tokens, len(history))
                self.assertEqual(got.usage.cached_tokens_local + got.usage.cached_tokens_remote,
                                 len(history) // 16 * 16)
                lib.wait_for(lambda: len(cache_client.get_session(session_id).turn_ends) == 4,
                             what="turn 4's record")
                context = list(cache_client.get_session(session_id).tokens)[:got.usage.prompt_tokens]
                self.assertEqual(context[:len(history)], history)
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % b.metrics_port,
                                            timeout=5) as m:
                    self.assertIn("\nkvserve_session_cache_sessions_refreshed_total 1\n",
                                  m.read().decode())
            self.assert_cold_equal(got, context, 20)

    def test_no_prompt_or_output_in_the_logs(self):
        """A full run (sessions, streams, the cache, an outage) at the default log level:
        neither the prompts sent nor the text generated appear in any process's output."""
        secret = "Zorblax quintessential marmalade"
        outputs = []
        with lib.CacheProcess(CACHE, ["--memory-bytes", str(64 << 20)]) as cache, \
                grpc.insecure_channel(cache.target()) as cch:
            with replica(cache) as a, replica(cache) as b:
                session_id, _ = self.first_turn(a, Cache(cch))
                with grpc.insecure_channel(b.target()) as ch:
                    api = Inference(ch)
                    for text in (secret, FIRST + " " + secret):
                        r = api.generate(greedy(24, text=text, session_id=session_id), timeout=60)
                        outputs.append(r.text)
                        outputs.append(api.generate(greedy(16, text=text), timeout=60).text)
                cache.kill()  # an incident: its log lines must not carry request data either
                with grpc.insecure_channel(a.target()) as ch:
                    outputs.append(Inference(ch).generate(greedy(16, text=secret), timeout=60).text)
            logs = "\n".join(a.lines + b.lines + cache.lines)
        self.assertTrue(any("session cache call" in l for l in a.lines), a.lines)
        for needle in [secret, FIRST[:40]] + [o.strip()[:30] for o in outputs if len(o.strip()) >= 12]:
            self.assertNotIn(needle, logs)

    def test_restarted_replica_and_restarted_disk_cache(self):
        disk = tempfile.mkdtemp(prefix="kvserve-cache-disk-")
        port = lib.free_port()
        try:
            args = ["--memory-bytes", str(64 << 20), "--disk-dir", disk,
                    "--disk-bytes", str(512 << 20)]
            with lib.CacheProcess(CACHE, args, port) as cache, grpc.insecure_channel(cache.target()) as cch:
                cache_client = Cache(cch)
                with replica(cache) as a:
                    session_id, history = self.first_turn(a, cache_client)
                # The replica restarts: the next turn reuses the prefix remotely.
                with replica(cache) as a2, grpc.insecure_channel(a2.target()) as ch:
                    got = Inference(ch).generate(greedy(20, text=SECOND, session_id=session_id),
                                                 timeout=60)
                    self.assertGreater(got.usage.cached_tokens_remote, 0)
                    # Turn 2's record and blocks are written behind: wait for both.
                    lib.wait_for(lambda: len(cache_client.get_session(session_id).turn_ends) == 2,
                             what="turn 2's record")
                    history2 = list(cache_client.get_session(session_id).tokens)
                    lib.wait_for(lambda: cache_client.stats().blocks >= len(history2) // 16,
                             what="turn 2's blocks")
            # The cache restarts on the same directory: its blocks and the session record
            # (<disk-dir>/sessions) survived.
            with lib.CacheProcess(CACHE, args, port) as cache, grpc.insecure_channel(cache.target()) as cch:
                cache_client = Cache(cch)
                self.assertGreater(cache_client.stats().blocks, 0)
                self.assertEqual(cache_client.stats().sessions, 1)
                record = cache_client.get_session(session_id)
                self.assertEqual(list(record.tokens), history2)
                self.assertEqual(len(record.turn_ends), 2)
                # A fresh replica continues the session by id: it restores the record and
                # fetches the history's blocks from the restarted cache.
                with replica(cache) as c, grpc.insecure_channel(c.target()) as ch:
                    got = Inference(ch).generate(
                        greedy(20, text=" They played all day.", session_id=session_id),
                        timeout=60)
                    self.assertGreater(got.usage.cached_tokens_remote, 0)
                    self.assertEqual(got.usage.cached_tokens_remote, len(history2) // 16 * 16)
                    self.assertGreater(got.usage.prompt_tokens, len(history2))
                with replica(cache) as b, grpc.insecure_channel(b.target()) as ch:
                    got = Inference(ch).generate(greedy(20, ids=history), timeout=60)
                    self.assertEqual(got.usage.cached_tokens_remote,
                                     (len(history) - 1) // 16 * 16)
        finally:
            shutil.rmtree(disk, ignore_errors=True)

    def test_redis_backend(self):
        redis = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(redis):
            self.skipTest("redis-server is not installed")
        port = lib.free_port()
        workdir = tempfile.mkdtemp(prefix="kvserve-redis-")
        proc = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", workdir],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            args = ["--redis", "127.0.0.1:%d" % port]
            with lib.CacheProcess(CACHE, args) as cache, grpc.insecure_channel(cache.target()) as cch:
                cache_client = Cache(cch)
                with replica(cache) as a, replica(cache) as b:
                    session_id, history = self.first_turn(a, cache_client)
                    with grpc.insecure_channel(b.target()) as ch:
                        got = Inference(ch).generate(
                            greedy(20, text=SECOND, session_id=session_id), timeout=60)
                    self.assertEqual(got.usage.cached_tokens_remote, len(history) // 16 * 16)
                    self.assertEqual(cache_client.stats().backend, "redis")
        finally:
            proc.kill()
            proc.wait(timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)

    def test_cache_killed_during_traffic(self):
        port = lib.free_port()
        cache = lib.CacheProcess(CACHE, ["--memory-bytes", str(128 << 20)], port).__enter__()
        errors = []
        done = threading.Event()
        with replica(cache) as a:
            def traffic():
                with grpc.insecure_channel(a.target()) as ch:
                    api = Inference(ch)
                    i = 0
                    while not done.is_set():
                        try:
                            api.generate(greedy(8, text=FIRST + " %d" % i), timeout=30)
                        except grpc.RpcError as e:  # any failure fails the test
                            errors.append(e)
                        i += 1
            t = threading.Thread(target=traffic)
            t.start()
            time.sleep(1.0)
            cache.kill()  # SIGKILL mid-traffic
            time.sleep(2.0)
            cache = lib.CacheProcess(CACHE, ["--memory-bytes", str(128 << 20)], port).__enter__()
            time.sleep(2.0)
            done.set()
            t.join(timeout=60)
            self.assertEqual(errors, [])
            # Reuse resumes: what A writes now, a fresh replica finds. A's channel reaches the
            # restarted cache after gRPC's reconnect backoff (seconds after an outage, longer on
            # a loaded machine), and a write that fails meanwhile is only counted, so A repeats
            # the request (each stores all its blocks the cache lacks) until the cache has some.
            def written():
                with grpc.insecure_channel(a.target()) as ch:
                    Inference(ch).generate(greedy(8, text=FIRST + " again"), timeout=30)
                with grpc.insecure_channel(cache.target()) as cch:
                    return Cache(cch).stats().blocks > 0
            lib.wait_for(written, timeout=60, what="blocks after the restart")
            with replica(cache) as b, grpc.insecure_channel(b.target()) as ch:
                got = Inference(ch).generate(greedy(8, text=FIRST + " again"), timeout=30)
                self.assertGreater(got.usage.cached_tokens_remote, 0)
        cache.__exit__(None, None, None)
        # One incident line each way, not one per request.
        failures = [l for l in a.lines if "session cache call" in l]
        self.assertLessEqual(len(failures), 2, failures)

    def test_bearer_tokens(self):
        tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
        tokens.write("# token name\nsecret-one replica\n")
        tokens.close()
        token_file = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
        token_file.write("secret-one\n")
        token_file.close()
        try:
            with lib.CacheProcess(CACHE, ["--auth-tokens", tokens.name]) as cache, \
                    grpc.insecure_channel(cache.target()) as cch:
                for bad in (None, "wrong"):
                    with self.assertRaises(grpc.RpcError) as ctx:
                        Cache(cch, bad).stats()
                    self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                self.assertEqual(lib.health_status(cch, ""), 1)
                cache_client = Cache(cch, "secret-one")
                extra = ["--session-cache-token-file", token_file.name]
                with replica(cache, extra) as a, replica(cache, extra) as b:
                    session_id, history = self.first_turn(a, cache_client)
                    with grpc.insecure_channel(b.target()) as ch:
                        got = Inference(ch).generate(
                            greedy(10, text=SECOND, session_id=session_id), timeout=60)
                    self.assertGreater(got.usage.cached_tokens_remote, 0)
                # A replica without the token still answers, by recomputing.
                with replica(cache) as c, grpc.insecure_channel(c.target()) as ch:
                    got = Inference(ch).generate(greedy(10, ids=history), timeout=60)
                    self.assertEqual(got.usage.cached_tokens_remote, 0)
        finally:
            os.unlink(tokens.name)
            os.unlink(token_file.name)


if __name__ == "__main__":
    lib.main(280)
