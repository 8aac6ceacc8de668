"""Load and soak on loopback against the real kvserve (and kvserve-cache), the load from
kvserve-cli bench (tests/bench_lib.py): 200 concurrent streams for 60 s
(KVSERVE_SOAK_STREAMS / KVSERVE_SOAK_SECONDS change both; the long soak is
`KVSERVE_SOAK_SECONDS=1800 ctest -R load_soak_test`, see docs/reliability.md).

Three runs: independent streams; multi-turn conversations in sessions; the same
conversations on a replica with the session cache service. Each run checks:
- no status but OK and RESOURCE_EXHAUSTED carrying the retry hint; every stream ended with
  its usage;
- resident memory flat after warm-up: the largest RSS of the last third of the run is at
  most RSS_MARGIN above the largest of the middle third;
- every KV block back in the pool at the end (kvserve_kv_blocks_used 0), nothing running;
- the server's per-code call counts equal what the clients saw;
- greedy outputs of one prompt agree with each other (all prefixes of the longest);
- conversations reuse their history (turns 2+ report cached tokens);
and prints client-side TTFT and inter-token latency percentiles (p50/p90/p99) and the
server histogram's p99 bucket.

Usage: /usr/bin/python3 load_soak_test.py KVSERVE_BIN CACHE_BIN CLI_BIN MODEL PYTHON_STUBS_DIR
"""
import json
import os
import sys
import unittest

import grpc

KVSERVE, CACHE, CLI, MODEL, PYDIR = sys.argv[1:6]
del sys.argv[1:6]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_lib as load  # noqa: E402
import kvserve_testlib as lib  # noqa: E402

SECONDS = float(os.environ.get("KVSERVE_SOAK_SECONDS", "60"))
STREAMS = int(os.environ.get("KVSERVE_SOAK_STREAMS", "200"))
RSS_MARGIN = 16 << 20


class LoadSoakTest(unittest.TestCase):

    def soak(self, name, workload, extra_args=(), method="GenerateStream"):
        args = list(extra_args)
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            before = load.scrape(server.metrics_port)
            sampler = load.RssSampler(server.proc.pid)
            stats, _ = load.Bench(CLI, server.target(), STREAMS, seconds=SECONDS,
                                  args=workload).wait(timeout=SECONDS + 120)
            samples = sampler.stop()
            after = load.wait_idle(server.metrics_port)
            with grpc.insecure_channel(server.target()) as ch:
                self.assertEqual(lib.health_status(ch, ""), 1)
            report = self.report(name, stats, samples, after)
            print(json.dumps(report), flush=True)

            self.assertEqual(stats["malformed"], {})
            for m, codes in stats["calls"].items():
                for code, n in codes.items():
                    self.assertIn(code, ("OK", "RESOURCE_EXHAUSTED"), "%s: %d x %s" % (m, n, code))
            self.assertGreater(load.count(stats, method, "OK"), STREAMS)
            self.assertLessEqual(report["rss_growth_mib"], RSS_MARGIN / 2**20, report)
            # Every block back (pins of blocks being written to the session cache last
            # until the write is done).
            lib.wait_for(lambda: load.metric(load.scrape(server.metrics_port),
                                             "kvserve_kv_blocks_used") == 0,
                         timeout=30, what="every KV block back in the pool")
            for m, codes in stats["calls"].items():
                for code, n in codes.items():
                    served = load.served_calls(before, after, m, code)
                    self.assertEqual(served, n, "%s %s: server counted %d, clients saw %d"
                                     % (m, code, served, n))
            self.assertEqual(load.inconsistent_outputs(stats.get("outputs", {})), {})
            return stats, after

    def report(self, name, stats, samples, metrics):
        third = SECONDS / 3
        mid = [b for t, b in samples if third < t <= 2 * third]
        tail = [b for t, b in samples if t > 2 * third]
        growth = (max(tail) - max(mid)) / 2**20 if mid and tail else 0.0
        return {
            "run": name, "streams": STREAMS, "seconds": SECONDS,
            "calls": {"%s %s" % (m, code): n for m, codes in sorted(stats["calls"].items())
                      for code, n in sorted(codes.items())},
            "tokens": stats["tokens"]["output"],
            "tokens_per_s": round(stats["tokens"]["output"] / SECONDS, 1),
            "ttft_ms": {q: round(stats["ttft_ms"]["p%d" % q], 1) for q in (50, 90, 99)},
            "itl_ms": {q: round(stats["itl_ms"]["p%d" % q], 2) for q in (50, 90, 99)},
            "server_itl_p99_bucket_s": load.histogram_quantile(
                metrics, "kvserve_request_inter_token_latency_seconds", 0.99),
            "rss_mib": {"start": round(samples[0][1] / 2**20, 1),
                        "max": round(max(b for _, b in samples) / 2**20, 1),
                        "end": round(samples[-1][1] / 2**20, 1)},
            "rss_growth_mib": round(growth, 1),
            "cached_later_turns": [stats["later_turns"]["cached"], stats["later_turns"]["total"]],
        }

    def test_streams(self):
        self.soak("streams", load.STREAM_ARGS)

    def test_conversations(self):
        stats, _ = self.soak("sessions", load.CONVERSATION_ARGS)
        turns = stats["later_turns"]
        self.assertGreater(turns["total"], 0)
        self.assertGreaterEqual(turns["cached"], 0.95 * turns["total"])

    def test_conversations_with_session_cache(self):
        with lib.CacheProcess(CACHE, ["--memory-bytes", str(256 << 20)]) as cache:
            stats, metrics = self.soak(
                "sessions+cache", load.CONVERSATION_ARGS,
                ["--session-cache", cache.target(), "--session-cache-timeout", "2s"])
            turns = stats["later_turns"]
            self.assertGreater(turns["total"], 0)
            self.assertGreaterEqual(turns["cached"], 0.95 * turns["total"])
            self.assertGreater(load.metric(metrics, "kvserve_session_cache_stored_blocks_total"),
                               0)
            errors = sum(v for (n, _), v in metrics.items()
                         if n == "kvserve_session_cache_errors_total")
            self.assertEqual(errors, 0)


if __name__ == "__main__":
    lib.main(seconds=3 * (SECONDS + 150))
