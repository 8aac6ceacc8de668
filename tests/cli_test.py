"""kvserve-cli against the real kvserve binary on loopback.

- generate (unary and streamed), tokenize, info, sessions open/get/fork/close.
- chat driven through standard input: three turns in one session; turns 2 and 3 report
  cached tokens (the KV of the earlier turns); /fork continues in a fork.
- bench --json, closed loop and Poisson arrivals with multi-turn conversations over a
  shared system prompt: the report's counts add up (total = ok + failed = the requests
  asked for, failed = the sum of errors by code, output tokens = requests x max tokens)
  and conversations hit the prefix cache; prompts drawn from a file, drawn max tokens,
  greedy outputs recorded, every call counted by method and logged (CLOCK_MONOTONIC
  times); streams cancelled after their first tokens; SIGTERM ends a run early with the
  report.
- bearer tokens: against kvserve --auth-tokens, --token-file works and no token is
  UNAUTHENTICATED (not retried).
- --help documents every flag.
- session affinity with real processes: chat with --target listing three replicas that
  share a kvserve-cache; three turns land on the session's owner, which is then stopped;
  the next turns move to one other replica, continue the history from the cache
  (cached tokens remote) and succeed.

Usage: /usr/bin/python3 cli_test.py KVSERVE_BIN CLI_BIN MODEL CACHE_BIN PYTHON_STUBS_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

KVSERVE, CLI, MODEL, CACHE, PYDIR = sys.argv[1:6]
del sys.argv[1:6]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import session_cache_pb2 as cpb  # noqa: E402

PROMPT = "Once upon a time"
USAGE_RE = re.compile(r"^\[FINISH_REASON_\w+\] prompt (\d+) \(cached local (\d+), remote (\d+), "
                      r"computed (\d+)\), completion (\d+); queue [\d.]+ ms, ttft [\d.]+ ms")


def server(extra=()):
    return lib.KvserveProcess(KVSERVE, MODEL, ["--kv-budget-mib", "32"] + list(extra))


def cli(target, *args, stdin=None, extra=()):
    return subprocess.run([CLI, args[0], "--target", target] + list(extra) + list(args[1:]),
                          input=stdin, capture_output=True, text=True, timeout=120)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = server().__enter__()
        cls.target = cls.server.target()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def test_generate_unary_and_streamed(self):
        for stream in ([], ["--stream"]):
            out = cli(self.target, "generate", "--prompt", PROMPT, "--max-tokens", "12",
                      *stream)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertTrue(out.stdout.startswith(PROMPT + ", there was"), out.stdout)
            m = USAGE_RE.search(out.stderr.strip().splitlines()[-1])
            self.assertIsNotNone(m, out.stderr)
            self.assertEqual(int(m.group(5)), 12)

    def test_tokenize_info_and_sessions(self):
        out = cli(self.target, "tokenize", "--prompt", PROMPT, "--add-bos")
        self.assertEqual(out.returncode, 0, out.stderr)
        ids = [int(t) for t in out.stdout.split()]
        self.assertEqual(ids[0], 1)
        self.assertIn("%d tokens" % len(ids), out.stderr)
        info = cli(self.target, "info")
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertIn("vocab_size: 512", info.stdout)
        opened = cli(self.target, "sessions", "open", "--ttl", "60s")
        self.assertEqual(opened.returncode, 0, opened.stderr)
        sid = opened.stdout.split()[0]
        self.assertTrue(sid.startswith("s-"), opened.stdout)
        got = cli(self.target, "sessions", "get", sid)
        self.assertIn("history_tokens=0", got.stdout)
        fork = cli(self.target, "sessions", "fork", sid)
        self.assertEqual(fork.returncode, 0, fork.stderr)
        self.assertNotEqual(fork.stdout.split()[0], sid)
        self.assertEqual(cli(self.target, "sessions", "close", sid).returncode, 0)
        gone = cli(self.target, "sessions", "get", sid)
        self.assertEqual(gone.returncode, 1)
        self.assertIn("NOT_FOUND", gone.stderr)
        self.assertEqual(cli(self.target, "sessions", "frobnicate").returncode, 2)

    def test_chat_three_turns_report_cached_tokens(self):
        turns = ["Once upon a time, there was a little girl named Lily who loved to play.",
                 "One day she saw a big dog in the park.",
                 "The dog wanted to play with her ball."]
        out = cli(self.target, "chat", "--max-tokens", "16", stdin="\n".join(turns) + "\n")
        self.assertEqual(out.returncode, 0, out.stderr)
        usages = [USAGE_RE.search(l) for l in out.stderr.splitlines()]
        usages = [m for m in usages if m]
        self.assertEqual(len(usages), 3, out.stderr)
        prompts = [int(m.group(1)) for m in usages]
        cached = [int(m.group(2)) for m in usages]
        self.assertEqual(cached[0], 0, out.stderr)
        # Turns 2 and 3 continue the history: its full blocks are cached.
        self.assertGreater(cached[1], 0, out.stderr)
        self.assertGreater(cached[2], 0, out.stderr)
        self.assertGreater(prompts[2], prompts[1])
        self.assertEqual(len(re.findall(r"client ttft [\d.]+ ms", out.stderr)), 3)
        self.assertIn("closed session", out.stderr)

    def test_chat_fork_and_reset_commands(self):
        out = cli(self.target, "chat", "--max-tokens", "8",
                  stdin="A small boy named Tom had a red kite and flew it every day in the "
                        "wind.\n/fork\nThen a dog came.\n/reset\nHello\n/nope\n")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("(fork of s-", out.stderr)
        self.assertIn("(new; closed s-", out.stderr)
        self.assertIn("unknown command /nope", out.stderr)
        usages = [m for m in map(USAGE_RE.search, out.stderr.splitlines()) if m]
        self.assertEqual(len(usages), 3, out.stderr)
        self.assertGreater(int(usages[1].group(2)), 0)  # the fork shares the parent's KV

    def bench(self, *args):
        out = cli(self.target, "bench", "--json", "--ignore-eos", "--max-tokens", "8", *args)
        self.assertEqual(out.returncode, 0, out.stderr)
        report = json.loads(out.stdout.strip().splitlines()[-1])
        req = report["requests"]
        self.assertEqual(req["total"], req["ok"] + req["failed"])
        self.assertEqual(req["failed"], sum(report["errors_by_code"].values()))
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            p = report[key]
            self.assertLessEqual(p["p50"], p["p90"])
            self.assertLessEqual(p["p90"], p["p99"])
        self.assertEqual(out.stderr, "")  # no progress bar: stderr is not a terminal
        return report

    def test_bench_closed_loop_counts_add_up(self):
        report = self.bench("--concurrency", "3", "--requests", "10")
        self.assertEqual(report["requests"]["total"], 10)
        self.assertEqual(report["requests"]["ok"], 10)
        self.assertEqual(report["tokens"]["output"], 10 * 8)
        self.assertGreater(report["output_tokens_per_s"], 0)
        self.assertGreater(report["ttft_ms"]["p50"], 0)
        self.assertEqual(report["config"]["concurrency"], 3)

    def test_bench_poisson_conversations_hit_the_cache(self):
        report = self.bench("--concurrency", "2", "--requests", "9", "--shape", "conversation",
                            "--turns", "3", "--request-rate", "20")
        self.assertEqual(report["requests"]["total"], 9)
        self.assertEqual(report["requests"]["ok"], 9)
        self.assertEqual(report["tokens"]["output"], 9 * 8)
        self.assertGreater(report["cache_hit_ratio"], 0.2)
        self.assertLessEqual(report["cache_hit_ratio"], 1.0)
        self.assertEqual(report["config"]["shape"], "conversation")

    def test_bench_duration_mode_and_bad_options(self):
        report = self.bench("--concurrency", "2", "--requests", "0", "--duration", "1s")
        self.assertGreater(report["requests"]["total"], 0)
        bad = cli(self.target, "bench", "--shape", "zigzag")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--shape", bad.stderr)

    def test_bench_prompts_outputs_and_call_log(self):
        # Longer than a KV block: a later turn reuses at least one full block of history.
        prompts = ["Once upon a time, there was a little girl named Lily. She loved to play "
                   "outside in the sun with her big red ball.",
                   "One day, a big dog went to the park with his friend the cat. They saw a "
                   "ball and ran after it all day long."]
        with tempfile.TemporaryDirectory() as tmp:
            prompts_file = os.path.join(tmp, "prompts")
            with open(prompts_file, "w") as f:
                f.write("\n".join(prompts) + "\n\n")
            log = os.path.join(tmp, "calls.jsonl")
            start = time.monotonic()
            report = self.bench("--concurrency", "2", "--requests", "12", "--shape",
                                "conversation", "--turns", "2", "--prompts-file", prompts_file,
                                "--max-tokens-min", "4", "--record-outputs", "--call-log", log)
            end = time.monotonic()
            with open(log) as f:
                calls = [json.loads(line) for line in f]
        self.assertEqual(report["calls"], {"OpenSession": {"OK": 6}, "CloseSession": {"OK": 6},
                                           "GenerateStream": {"OK": 12}})
        self.assertEqual(report["malformed"], {})
        self.assertEqual(report["later_turns"], {"total": 6, "cached": 6})
        self.assertGreaterEqual(report["tokens"]["output"], 12 * 4)  # max tokens in [4, 8]
        self.assertLessEqual(report["tokens"]["output"], 12 * 8)
        # First turns are drawn prompts; greedy answers of one prompt are prefixes of the
        # longest.
        self.assertLessEqual(set(report["outputs"]), set(prompts))
        for texts in report["outputs"].values():
            longest = max(texts, key=len)
            self.assertTrue(all(longest.startswith(t) for t in texts), texts)
        self.assertEqual(sorted(c["method"] for c in calls),
                         ["CloseSession"] * 6 + ["GenerateStream"] * 12 + ["OpenSession"] * 6)
        for c in calls:
            self.assertEqual((c["code"], c["message"]), ("OK", ""))
            self.assertTrue(start <= c["t"] <= end, (start, c, end))  # CLOCK_MONOTONIC

    def test_bench_cancels_and_stops_on_a_signal(self):
        out = cli(self.target, "bench", "--json", "--requests", "3", "--concurrency", "3",
                  "--max-tokens", "200", "--ignore-eos", "--cancel-after-tokens", "2")
        self.assertEqual(out.returncode, 3, out.stderr)  # some calls did not end OK
        report = json.loads(out.stdout)
        self.assertEqual(report["calls"], {"GenerateStream": {"CANCELLED": 3}})
        proc = subprocess.Popen([CLI, "bench", "--target", self.target, "--json", "--requests",
                                 "0", "--duration", "120s", "--max-tokens", "8"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, stderr)
        report = json.loads(stdout)
        self.assertGreater(report["requests"]["ok"], 0)
        self.assertLess(report["duration_s"], 60)

    def test_help_documents_every_flag(self):
        out = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=30)
        text = out.stdout + out.stderr
        for command in ("generate", "chat", "tokenize", "sessions", "info", "bench"):
            self.assertIn("kvserve-cli " + command, text)
        flags = re.findall(r"^\s+--(\w+) \((.*?)\);", text, re.M | re.S)
        self.assertGreater(len(flags), 20, text)
        for name, help_text in flags:
            self.assertGreater(len(help_text.strip()), 10, name)


class CliAuthTest(unittest.TestCase):
    def test_token_file_against_auth_tokens(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens")
            with open(tokens, "w") as f:
                f.write("secret-alice alice\nsecret-bob bob\n")
            token_file = os.path.join(tmp, "bob.token")
            with open(token_file, "w") as f:
                f.write("secret-bob\n")
            wrong = os.path.join(tmp, "wrong.token")
            with open(wrong, "w") as f:
                f.write("secret-eve\n")
            with server(["--auth-tokens", tokens]) as s:
                ok = cli(s.target(), "generate", "--prompt", PROMPT, "--max-tokens", "4",
                         extra=["--token-file", token_file])
                self.assertEqual(ok.returncode, 0, ok.stderr)
                chat = cli(s.target(), "chat", "--max-tokens", "4", stdin="Hello\nAgain\n",
                           extra=["--token-file", token_file])
                self.assertEqual(chat.returncode, 0, chat.stderr)
                for extra in ([], ["--token-file", wrong]):
                    denied = cli(s.target(), "info", extra=extra)
                    self.assertEqual(denied.returncode, 1, denied.stderr)
                    self.assertIn("UNAUTHENTICATED", denied.stderr)
                missing = cli(s.target(), "info", extra=["--token-file", tmp + "/none"])
                self.assertEqual(missing.returncode, 2)
                self.assertIn("--token-file", missing.stderr)


def session_tokens(cache, session_id):
    """Tokens in `cache`'s record of `session_id` (-1: none)."""
    with grpc.insecure_channel(cache.target()) as channel:
        get = channel.unary_unary("/kvserve.v1.SessionCache/GetSession",
                                  request_serializer=cpb.GetSessionRecordRequest.SerializeToString,
                                  response_deserializer=cpb.SessionRecord.FromString)
        try:
            return len(get(cpb.GetSessionRecordRequest(session_id=session_id), timeout=5).tokens)
        except grpc.RpcError:
            return -1


class Chat:
    """An interactive `kvserve-cli chat`: send a line, wait for its usage lines."""

    TURN_RE = re.compile(r"client ttft [\d.]+ ms, replica (\S+)")

    def __init__(self, args):
        self.proc = subprocess.Popen([CLI, "chat"] + args, stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.cv = threading.Condition()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self):
        for line in self.proc.stderr:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)
            self.cv.notify_all()

    def turn(self, text, timeout=60):
        """Sends a turn; returns (usage match, replica)."""
        with self.cv:
            start = len(self.lines)
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                new = self.lines[start:]
                if None in new:
                    raise AssertionError("chat ended: %r" % self.lines)
                replicas = [self.TURN_RE.search(l) for l in new]
                replicas = [m.group(1) for m in replicas if m]
                usages = [m for m in map(USAGE_RE.search, new) if m]
                if replicas and usages:
                    return usages[0], replicas[0]
                if any(l.startswith("kvserve-cli:") for l in new):
                    raise AssertionError("turn failed: %r" % new)
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("no usage line: %r" % self.lines)
                self.cv.wait(left)

    def close(self):
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        self.pump.join(timeout=10)
        self.proc.stderr.close()
        return code, self.lines


class CliAffinityTest(unittest.TestCase):
    def test_chat_over_three_replicas_follows_its_session(self):
        with lib.CacheProcess(CACHE) as cache:
            args = ["--kv-budget-mib", "32", "--session-cache", cache.target()]
            replicas = [lib.KvserveProcess(KVSERVE, MODEL, args).__enter__() for _ in range(3)]
            try:
                targets = [r.target() for r in replicas]
                chat = Chat(["--target", ",".join(targets), "--max-tokens", "8"])
                first = [chat.turn("Once upon a time, there was a little girl named Lily who "
                                   "loved to play outside in the sun."),
                         chat.turn("One day she saw a big dog in the park."),
                         chat.turn("The dog wanted to play with her ball.")]
                owner = first[0][1]
                self.assertEqual([r for _, r in first], [owner] * 3)
                self.assertGreater(int(first[1][0].group(2)), 0)  # cached local
                self.assertGreater(int(first[2][0].group(2)), 0)
                history = int(first[2][0].group(1)) + int(first[2][0].group(5))
                sid = re.search(r"session (s-[0-9a-f]+)", chat.lines[0]).group(1)
                end = time.monotonic() + 20
                while session_tokens(cache, sid) != history and time.monotonic() < end:
                    time.sleep(0.02)
                self.assertEqual(session_tokens(cache, sid), history)

                stopped = replicas[targets.index(owner)]
                stopped.__exit__(None, None, None)  # killed
                moved, where = chat.turn("Then it started to rain.")
                self.assertNotEqual(where, owner)
                self.assertGreater(int(moved.group(1)), history)  # the whole history
                self.assertGreater(int(moved.group(3)), 0)  # fetched from the cache
                again, where_again = chat.turn("They ran home together.")
                self.assertEqual(where_again, where)
                self.assertGreater(int(again.group(2)), 0)
                code, lines = chat.close()
                self.assertEqual(code, 0, lines)
            finally:
                for r in replicas:
                    if r.proc.poll() is None:
                        r.__exit__(None, None, None)


if __name__ == "__main__":
    lib.main(240)
