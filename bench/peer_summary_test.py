#!/usr/bin/env python3
"""bench/peer_compare.sh and bench/peer_summary.py without real peers: stand-in programs
(kvserve-bench, llama-bench, llama-batched-bench as small shell scripts) that log their
call and print fixed figures, so the test checks the orchestration (programs by
environment, the rotation of the order by round, the file names, the errors) and the
table's arithmetic (medians over rounds, kvserve against the better peer of each round).

Usage: peer_summary_test.py   (run from anywhere; finds the scripts beside itself)
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_summary  # noqa: E402


def write_exe(path, text):
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def kvserve_lines(pp, tg, b16, bound=0.9, weight=9.0, probe=10.0):
    rows = [{"test": "bandwidth", "median": probe},
            {"test": "prefill", "backend": "cpu_blas", "median": pp},
            {"test": "decode", "backend": "cpu_blas", "batch": 1, "median": tg,
             "fraction_of_bound": bound, "weight_gbs": weight},
            {"test": "decode", "backend": "cpu_blas", "batch": 16, "median": b16},
            {"test": "decode", "backend": "reference", "batch": 1, "median": 1.0}]
    return "".join(json.dumps(r) + "\n" for r in rows)


def peer_files(prefix, pp, tg, b16):
    with open(prefix + "-bench.json", "w") as f:
        json.dump([{"n_prompt": 512, "n_gen": 0, "avg_ts": pp},
                   {"n_prompt": 0, "n_gen": 64, "avg_ts": tg}], f)
    with open(prefix + "-batched.jsonl", "w") as f:
        f.write("some log line\n")
        for pl, s in [(1, tg), (16, b16)]:
            f.write(json.dumps({"pl": pl, "speed_tg": s}) + "\n")


class SummaryTest(unittest.TestCase):
    def test_ratio_is_against_the_better_peer_of_each_round(self):
        with tempfile.TemporaryDirectory() as out:
            # Round 1: llama.cpp is the better peer for prefill, ik for decode.
            with open(os.path.join(out, "r1-m-kvserve.json"), "w") as f:
                f.write(kvserve_lines(pp=300, tg=60, b16=400))
            peer_files(os.path.join(out, "r1-m-llama.cpp"), pp=200, tg=40, b16=100)
            peer_files(os.path.join(out, "r1-m-ik_llama.cpp"), pp=150, tg=50, b16=200)
            # Round 2: only llama.cpp, in the older file layout.
            with open(os.path.join(out, "r2-m-kvserve.json"), "w") as f:
                f.write(kvserve_lines(pp=100, tg=30, b16=300))
            peer_files(os.path.join(out, "r2-m-llama"), pp=100, tg=60, b16=100)
            runs, peers = peer_summary.load(out)
            self.assertEqual(peers, ["llama.cpp", "ik_llama.cpp"])
            table = peer_summary.table(runs, peers).splitlines()
            self.assertEqual(len(table), 3)
            cells = [c.strip() for c in table[2].strip("|").split("|")]
            self.assertEqual(cells[0], "m")
            self.assertEqual(cells[1], "2")
            # Prefill medians: kvserve (300, 100) -> 200; llama.cpp (200, 100) -> 150; ik 150.
            self.assertEqual(cells[2], "200.0 / 150.0 / 150.0")
            # Per-round ratios 300/200 = 1.5 and 100/100 = 1.0.
            self.assertEqual(cells[3], "1.25x (1.00-1.50)")
            # Decode: 60/50 = 1.2 and 30/60 = 0.5.
            self.assertEqual(cells[4], "45.0 / 50.0 / 50.0")
            self.assertEqual(cells[5], "0.85x (0.50-1.20)")
            self.assertEqual(cells[6], "90%")
            self.assertEqual(cells[7], "90%")
            # b16: 400/200 = 2.0 and 300/100 = 3.0.
            self.assertEqual(cells[9], "2.50x (2.00-3.00)")

    def test_missing_peer_figure_is_left_out(self):
        with tempfile.TemporaryDirectory() as out:
            with open(os.path.join(out, "r1-m-kvserve.json"), "w") as f:
                f.write(kvserve_lines(pp=300, tg=60, b16=400))
            peer_files(os.path.join(out, "r1-m-ik_llama.cpp"), pp=150, tg=50, b16=200)
            os.remove(os.path.join(out, "r1-m-ik_llama.cpp-batched.jsonl"))
            runs, peers = peer_summary.load(out)
            self.assertEqual(peers, ["ik_llama.cpp"])
            cells = [c.strip() for c in peer_summary.table(runs, peers).splitlines()[2]
                     .strip("|").split("|")]
            self.assertEqual(cells[2], "300.0 / 150.0")
            self.assertEqual(cells[3], "2.00x")
            self.assertEqual(cells[8], "400.0 / -")
            self.assertEqual(cells[9], "-")

    def test_batched_table_in_the_log_when_the_jsonl_has_none(self):
        # ik_llama.cpp's llama-batched-bench ignores --output-format and prints its
        # markdown table on stderr.
        with tempfile.TemporaryDirectory() as out:
            with open(os.path.join(out, "r1-m-kvserve.json"), "w") as f:
                f.write(kvserve_lines(pp=300, tg=60, b16=400))
            prefix = os.path.join(out, "r1-m-ik_llama.cpp")
            peer_files(prefix, pp=150, tg=50, b16=999)
            with open(prefix + "-batched.jsonl", "w") as f:
                f.write("\n")
            with open(prefix + "-batched.log", "w") as f:
                f.write("main: n_kv_max = 2048\n\n"
                        "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s |"
                        " S_TG t/s |      T s |    S t/s |\n"
                        "|-------|--------|------|--------|----------|----------|----------|"
                        "----------|----------|----------|\n"
                        "|     4 |     32 |    1 |     36 |    0.018 |   220.28 |    0.117 |"
                        "   273.06 |    0.135 |   265.98 |\n"
                        "|     4 |     32 |   16 |    576 |    0.042 |  1529.89 |    0.793 |"
                        "   645.26 |    0.835 |   689.56 |\n")
            runs, peers = peer_summary.load(out)
            cells = [c.strip() for c in peer_summary.table(runs, peers).splitlines()[2]
                     .strip("|").split("|")]
            self.assertEqual(cells[8], "400.0 / 645.3")
            self.assertEqual(cells[9], "0.62x")


class CompareScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.log = os.path.join(d, "calls.log")
        self.build = os.path.join(d, "build")
        os.makedirs(os.path.join(self.build, "bench"))
        write_exe(os.path.join(self.build, "bench", "kvserve-bench"),
                  'echo kvserve >> "%s"\ncat <<"EOF"\n%sEOF\n' %
                  (self.log, kvserve_lines(pp=300, tg=60, b16=400)))
        self.bins = {}
        for peer, pp in [("llama.cpp", 200), ("ik_llama.cpp", 250)]:
            b = os.path.join(d, peer)
            os.makedirs(b)
            write_exe(os.path.join(b, "llama-bench"),
                      'echo %s >> "%s"\necho \'[{"n_prompt": 512, "n_gen": 0, "avg_ts": %d},'
                      ' {"n_prompt": 0, "n_gen": 64, "avg_ts": 50}]\'\n' % (peer, self.log, pp))
            write_exe(os.path.join(b, "llama-batched-bench"),
                      'echo \'{"pl": 16, "speed_tg": 100}\'\n')
            self.bins[peer] = b
        self.model = os.path.join(d, "tiny.gguf")
        with open(self.model, "wb") as f:
            f.write(b"GGUF")
        self.out = os.path.join(d, "out")

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, env_extra, rounds="3"):
        env = {k: v for k, v in os.environ.items()
               if k not in ("LLAMA_CPP_BIN", "IK_LLAMA_CPP_BIN")}
        env.update(env_extra)
        return subprocess.run(
            ["bash", os.path.join(HERE, "peer_compare.sh"), self.build, self.out, rounds,
             self.model], env=env, capture_output=True, text=True)

    def test_rounds_rotate_the_order_and_the_table_reads_them(self):
        r = self.run_script({"LLAMA_CPP_BIN": self.bins["llama.cpp"],
                             "IK_LLAMA_CPP_BIN": self.bins["ik_llama.cpp"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            calls = f.read().split()
        self.assertEqual(calls, ["kvserve", "llama.cpp", "ik_llama.cpp",
                                 "llama.cpp", "ik_llama.cpp", "kvserve",
                                 "ik_llama.cpp", "kvserve", "llama.cpp"])
        s = subprocess.run([sys.executable, os.path.join(HERE, "peer_summary.py"), self.out],
                           capture_output=True, text=True)
        self.assertEqual(s.returncode, 0, s.stderr)
        cells = [c.strip() for c in s.stdout.splitlines()[2].strip("|").split("|")]
        self.assertEqual(cells[:4], ["tiny", "3", "300.0 / 200.0 / 250.0", "1.20x (1.20-1.20)"])

    def test_one_peer_is_enough(self):
        r = self.run_script({"IK_LLAMA_CPP_BIN": self.bins["ik_llama.cpp"]}, rounds="2")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            self.assertEqual(f.read().split(),
                             ["kvserve", "ik_llama.cpp", "ik_llama.cpp", "kvserve"])

    def test_a_crashing_peer_costs_only_its_own_figures(self):
        # llama.cpp's llama-bench dies of SIGILL (as a native build using AMX does where the
        # OS does not enable the tiles); its batched bench and ik_llama.cpp still run.
        write_exe(os.path.join(self.bins["llama.cpp"], "llama-bench"),
                  'echo llama.cpp >> "%s"\necho "[{partial"\nkill -ILL $$\n' % self.log)
        r = self.run_script({"LLAMA_CPP_BIN": self.bins["llama.cpp"],
                             "IK_LLAMA_CPP_BIN": self.bins["ik_llama.cpp"]}, rounds="2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("peer_compare: llama.cpp llama-bench: killed by SIGILL on tiny.gguf",
                      r.stderr)
        with open(self.log) as f:
            self.assertEqual(f.read().split(), ["kvserve", "llama.cpp", "ik_llama.cpp",
                                                "llama.cpp", "ik_llama.cpp", "kvserve"])
        for rnd in (1, 2):
            self.assertFalse(os.path.exists(
                os.path.join(self.out, "r%d-tiny-llama.cpp-bench.json" % rnd)))
            self.assertTrue(os.path.exists(
                os.path.join(self.out, "r%d-tiny-llama.cpp-batched.jsonl" % rnd)))
        s = subprocess.run([sys.executable, os.path.join(HERE, "peer_summary.py"), self.out],
                           capture_output=True, text=True)
        self.assertEqual(s.returncode, 0, s.stderr)
        cells = [c.strip() for c in s.stdout.splitlines()[2].strip("|").split("|")]
        # llama.cpp's prefill is left out: kvserve's 300 against ik_llama.cpp's 250.
        self.assertEqual(cells[:4], ["tiny", "2", "300.0 / - / 250.0", "1.20x (1.20-1.20)"])
        self.assertEqual(s.stdout.count("killed by SIGILL"), 2, s.stdout)
        # A new run into the same folder starts a new list of failures.
        write_exe(os.path.join(self.bins["llama.cpp"], "llama-bench"),
                  'echo \'[{"n_prompt": 512, "n_gen": 0, "avg_ts": 200}]\'\n')
        r = self.run_script({"LLAMA_CPP_BIN": self.bins["llama.cpp"]}, rounds="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "failures.txt")))

    def test_no_peer_or_a_wrong_folder_is_an_error(self):
        r = self.run_script({})
        self.assertEqual(r.returncode, 2)
        self.assertIn("LLAMA_CPP_BIN", r.stderr)
        r = self.run_script({"LLAMA_CPP_BIN": self.dir.name})
        self.assertEqual(r.returncode, 2)
        self.assertIn("no executable", r.stderr)
        self.assertFalse(os.path.exists(self.log))


if __name__ == "__main__":
    unittest.main()
