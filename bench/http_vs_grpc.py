#!/usr/bin/env python3
"""Streaming over HTTP against gRPC, side by side (issue 39's targets: a streamed chat
completion's tokens/s at least 0.95x GenerateStream's, at 1 and 16 concurrent streams;
time to first token over HTTP within 1 ms of gRPC's at p50 on loopback).

Starts one kvserve (both listeners, --chat-template chatml: stories260K has no template of
its own), then per round and concurrency runs `kvserve-cli bench` twice with the same
workload, the prompt as one user message on both sides (--as-messages: gRPC
GenerateRequest.messages, HTTP "messages"), once per protocol; odd rounds gRPC first, even
rounds HTTP first. Prints each run's command once, then a table of medians over rounds:
tokens/s per protocol and their ratio, TTFT p50 per protocol and the difference (ratio and
difference as medians of the per-round pairs), and stream messages (gRPC messages, HTTP
events) per request: how many tokens each protocol's messages carry.
With --out DIR every run's JSON report is kept there.

Usage: bench/http_vs_grpc.py [--build BUILD_DIR | --kvserve BIN --cli BIN] [--model FILE] [--rounds 5]
         [--concurrency 1,16] [--requests 128] [--max-tokens 256] [--out DIR]
         [--server-arg=--threads=2 ...]
Exit code 1 when a run fails or reports a malformed answer.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LISTEN_RE = re.compile(r"listening on \S+ \(port (\d+)\).* http on \S+ \(port (\d+)\)")


def start_server(args):
    cmd = [args.kvserve or os.path.join(args.build, "service", "kvserve"), "--model", args.model,
           "--listen", "127.0.0.1:0", "--metrics-listen", "", "--http-listen", "127.0.0.1:0",
           "--chat-template", "chatml"] + args.server_arg
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline()
    m = LISTEN_RE.search(line)
    if not m:
        server.kill()
        sys.exit("kvserve did not say where it listens: %r\n(command: %s)" % (line, shlex.join(cmd)))
    grpc_port, http_port = int(m.group(1)), int(m.group(2))
    deadline = time.monotonic() + 60
    while True:  # /health answers 200 once the model is loaded
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % http_port, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            sys.exit("kvserve did not become healthy (command: %s)" % shlex.join(cmd))
        time.sleep(0.2)
    print("server: %s" % shlex.join(cmd))
    return server, grpc_port, http_port


def bench_command(args, protocol, concurrency, grpc_port, http_port):
    return [args.cli or os.path.join(args.build, "client", "kvserve-cli"),
            "--target", "127.0.0.1:%d" % grpc_port, "--max-attempts", "1",
            "bench", "--protocol", protocol, "--http-target", "127.0.0.1:%d" % http_port,
            "--http-endpoint", "chat", "--as-messages", "--prompt", args.prompt,
            "--concurrency", str(concurrency), "--requests", str(args.requests),
            "--max-tokens", str(args.max_tokens), "--ignore-eos", "--temperature", "0",
            "--warmup", str(max(1, concurrency)), "--json"]


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("exit %d: %s\n%s" % (done.returncode, shlex.join(cmd), done.stderr))
    report = json.loads(done.stdout)
    if report["malformed"] or report["requests"]["failed"]:
        sys.exit("failed or malformed answers: %s\n%s" % (shlex.join(cmd), done.stdout))
    return report


def median(values):
    return statistics.median(values) if values else float("nan")


def table(results, concurrencies):
    """results[(protocol, concurrency)] = [report, ...] (one per round, both protocols' i-th
    runs adjacent in time) -> the table text. Figures per protocol are medians over rounds;
    the ratio and the difference are medians of the per-round ones (paired: a load that
    drifts between rounds moves both runs of a round)."""
    head = ("streams", "gRPC tok/s", "HTTP tok/s", "HTTP/gRPC", "gRPC TTFT p50 ms",
            "HTTP TTFT p50 ms", "HTTP-gRPC ms", "gRPC msgs/req", "HTTP msgs/req")
    rows = [head]
    for c in concurrencies:
        g, h = results[("grpc", c)], results[("http", c)]
        tps = [(x["output_tokens_per_s"], y["output_tokens_per_s"]) for x, y in zip(g, h)]
        ttft = [(x["ttft_ms"]["p50"], y["ttft_ms"]["p50"]) for x, y in zip(g, h)]
        rows.append((str(c), "%.0f" % median([a for a, _ in tps]),
                     "%.0f" % median([b for _, b in tps]),
                     "%.3f" % median([b / a for a, b in tps]),
                     "%.3f" % median([a for a, _ in ttft]), "%.3f" % median([b for _, b in ttft]),
                     "%+.3f" % median([b - a for a, b in ttft]),
                     "%.1f" % median([x["stream_messages"] / x["requests"]["ok"] for x in g]),
                     "%.1f" % median([y["stream_messages"] / y["requests"]["ok"] for y in h])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("| " + " | ".join(cell.rjust(w) for cell, w in zip(r, widths)) + " |"
                     for r in rows[:1] + [tuple("-" * w for w in widths)] + rows[1:])


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--kvserve", default="", help="the kvserve binary (default BUILD/service/kvserve)")
    p.add_argument("--cli", default="",
                   help="the kvserve-cli binary (default BUILD/client/kvserve-cli)")
    p.add_argument("--model", default=os.path.join(ROOT, "models", "stories260K.gguf"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--requests", type=int, default=128, help="requests per run")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--out", default="", help="keep each run's JSON report in this folder")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra kvserve flag (repeatable), e.g. --server-arg=--threads=2")
    args = p.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    print("load average %s, %d CPUs" % (load_average(), os.cpu_count()))
    server, grpc_port, http_port = start_server(args)
    results = {(proto, c): [] for proto in ("grpc", "http") for c in concurrencies}
    try:
        for c in concurrencies:
            for proto in ("grpc", "http"):
                print("%s: %s" % (proto, shlex.join(
                    bench_command(args, proto, c, grpc_port, http_port))))
        for rnd in range(1, args.rounds + 1):
            order = ("grpc", "http") if rnd % 2 == 1 else ("http", "grpc")
            for c in concurrencies:
                for proto in order:
                    report = run(bench_command(args, proto, c, grpc_port, http_port))
                    results[(proto, c)].append(report)
                    print("round %d %-4s x%-2d %8.0f tok/s  ttft p50 %.3f ms" % (
                        rnd, proto, c, report["output_tokens_per_s"], report["ttft_ms"]["p50"]),
                        flush=True)
                    if args.out:
                        with open(os.path.join(args.out, "r%d-%s-c%d.json" % (rnd, proto, c)),
                                  "w") as f:
                            json.dump(report, f)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("\nload average %s; medians over %d rounds (%d requests of %d tokens a run, prompt %r "
          "as a user message; ratio and difference: medians of the per-round ones):"
          % (load_average(), args.rounds, args.requests, args.max_tokens, args.prompt))
    print(table(results, concurrencies))


if __name__ == "__main__":
    main()
