"""kvserve-cli against the real kvserve binary on loopback.

- generate (unary and streamed), tokenize, info, sessions open/get/fork/close.
- chat driven through standard input: three turns in one session; turns 2 and 3 report
  cached tokens (the KV of the earlier turns); /fork continues in a fork.
- bench --json, closed loop and Poisson arrivals with multi-turn conversations over a
  shared system prompt: the report's counts add up (total = ok + failed = the requests
  asked for, failed = the sum of errors by code, output tokens = requests x max tokens)
  and conversations hit the prefix cache.
- bearer tokens: against kvserve --auth-tokens, --token-file works and no token is
  UNAUTHENTICATED (not retried).
- --help documents every flag.

Usage: /usr/bin/python3 cli_test.py KVSERVE_BIN CLI_BIN MODEL
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

KVSERVE, CLI, MODEL = sys.argv[1:4]
del sys.argv[1:4]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

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


if __name__ == "__main__":
    lib.main(240)
