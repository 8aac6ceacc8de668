"""What the session record commit costs a turn (issue 35's target: at most 1 ms at p50 of a
turn's end-to-end time on loopback, stories260K, with and without --session-cache).

Not a timed test: a measurement. Starts a kvserve-cache and two replicas of stories260K on
loopback, one with --session-cache (every turn takes the session's lease, reads the record
and commits the next version before its answer) and one without (the session lives on the
replica only), then runs short session turns (4 prompt token ids, max_tokens 1..4,
ignore_eos, greedy) alternating between the two, one turn at a time, in several rounds;
each round opens fresh sessions (and a new one every 40 turns, inside the context).
Prints p50/p90 of the client-side end-to-end time per mode, per round and overall, and
the p50 difference.

Usage: /usr/bin/python3 tests/session_commit_overhead.py KVSERVE_BIN CACHE_BIN MODEL PYTHON_STUBS_DIR
           [--turns N (per mode per round, 400)] [--rounds R (5)] [--backend B]
"""
import argparse
import os
import random
import statistics
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvserve_testlib as lib  # noqa: E402


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kvserve")
    parser.add_argument("cache")
    parser.add_argument("model")
    parser.add_argument("pydir")
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default="cpu_blas")
    args = parser.parse_args()
    lib.add_python_stubs(args.pydir)
    from kvserve.v1 import inference_pb2 as pb

    def request(ids, max_tokens, session_id):
        r = pb.GenerateRequest(max_tokens=max_tokens, session_id=session_id, ignore_eos=True,
                               sampling=pb.SamplingParams(temperature=0.0))
        r.tokens.ids.extend(ids)
        return r

    base = ["--kv-budget-mib", "16", "--backend", args.backend]
    rng = random.Random(35)
    times = {"with": [], "without": []}
    rounds = []
    with lib.CacheProcess(args.cache, ["--memory-bytes", str(64 << 20)]) as cache, \
            lib.KvserveProcess(args.kvserve, args.model,
                               base + ["--session-cache", cache.target()]) as with_cache, \
            lib.KvserveProcess(args.kvserve, args.model, base) as without_cache, \
            grpc.insecure_channel(with_cache.target()) as wch, \
            grpc.insecure_channel(without_cache.target()) as nch:
        apis = {"with": lib.Inference(wch), "without": lib.Inference(nch)}
        sessions = {}
        used = {}

        def turn(mode, max_tokens, ids):
            api = apis[mode]
            if mode not in sessions or used[mode] >= 40:
                sessions[mode] = api.open_session(pb.OpenSessionRequest(), timeout=10).session_id
                used[mode] = 0
            used[mode] += 1
            start = time.perf_counter()
            r = api.generate(request(ids, max_tokens, sessions[mode]), timeout=30)
            elapsed = time.perf_counter() - start
            assert len(r.token_ids) == max_tokens
            return elapsed

        for mode in apis:  # warm-up: connections, first allocations
            for _ in range(20):
                turn(mode, 2, [rng.randrange(3, 500) for _ in range(4)])
        for round_ in range(args.rounds):
            sessions.clear()
            per = {"with": [], "without": []}
            for k in range(args.turns):
                max_tokens = rng.randrange(1, 5)
                ids = [rng.randrange(3, 500) for _ in range(4)]
                # Interleaved, the order alternating, the same turn shape for both modes.
                order = ("with", "without") if k % 2 == 0 else ("without", "with")
                for mode in order:
                    per[mode].append(turn(mode, max_tokens, ids))
            for mode in per:
                times[mode] += per[mode]
            p50w, p50n = statistics.median(per["with"]), statistics.median(per["without"])
            rounds.append(p50w - p50n)
            print("round %d: p50 with --session-cache %.3f ms, without %.3f ms, difference "
                  "%+.3f ms" % (round_ + 1, p50w * 1e3, p50n * 1e3, (p50w - p50n) * 1e3),
                  flush=True)
    print("turns per mode: %d (%d rounds x %d), max_tokens 1..4, 4 prompt ids, backend %s" %
          (len(times["with"]), args.rounds, args.turns, args.backend))
    for mode in ("with", "without"):
        v = times[mode]
        print("%-7s --session-cache: p50 %.3f ms, p90 %.3f ms, mean %.3f ms" %
              (mode, statistics.median(v) * 1e3, percentile(v, 0.9) * 1e3,
               statistics.mean(v) * 1e3))
    diff = statistics.median(times["with"]) - statistics.median(times["without"])
    print("p50 difference (the record commit and lease): %+.3f ms overall; per round %s ms" %
          (diff * 1e3, ", ".join("%+.3f" % (d * 1e3) for d in rounds)))


if __name__ == "__main__":
    main()
