#!/usr/bin/env python3
"""kvserve's speculative decoding with a draft model against llama.cpp's, side by side.

Runs four servers in turn, the order rotated each round: kvserve without drafts,
kvserve with --draft_model, llama-server without a draft, llama-server with -md DRAFT
--spec-type draft-simple; each gets the same greedy requests (token-id prompts, end of
text ignored) one at a time and is timed from the client (tokens / wall time of the
request; the prompts are short, so that is decode). Prints medians over the rounds, the
speedups, the acceptance each reports and kvserve's ratio to llama.cpp. llama.cpp is
built beside the project by hand (../shared/PEERS.md); this script only runs it.

Usage: bench/speculative_vs_llama.py --kvserve BUILD/service/kvserve
           --llama-server DIR/llama-server --target T.gguf --draft D.gguf
           [--draft-max 5] [--rounds 3] [--requests 4] [--tokens 128] [--threads 2]
           [--kvserve-draft-flags "--draft_min_margin 0.05"]
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_ready(url, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout} s")


class Server:
    """One configuration: how to start it and how to ask it for n tokens."""

    def __init__(self, name, kind, argv, model):
        self.name, self.kind, self.argv, self.model = name, kind, argv, model

    def run(self, prompts, tokens, log_dir):
        port = free_port()
        if self.kind == "kvserve":
            argv = self.argv + ["--http_listen", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0",
                                "--metrics_listen", ""]
            ready = f"http://127.0.0.1:{port}/v1/models"
        else:
            argv = self.argv + ["--port", str(port), "--host", "127.0.0.1"]
            ready = f"http://127.0.0.1:{port}/health"
        log = open(os.path.join(log_dir, self.name.replace(" ", "_") + ".log"), "ab")
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.path.dirname(argv[0]) + ":" + env.get("LD_LIBRARY_PATH", "")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        try:
            wait_ready(ready, proc)
            self.ask(port, prompts[0], 8)  # warm-up
            rates, drafted, accepted = [], 0, 0
            for p in prompts:
                start = time.perf_counter()
                n, d, a = self.ask(port, p, tokens)
                rates.append(n / (time.perf_counter() - start))
                drafted += d
                accepted += a
            return statistics.median(rates), drafted, accepted
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()

    def ask(self, port, prompt, tokens):
        if self.kind == "kvserve":
            r = post(f"http://127.0.0.1:{port}/v1/completions",
                     {"model": self.model, "prompt": prompt, "max_tokens": tokens,
                      "temperature": 0, "ignore_eos": True})
            u = r["usage"]
            d = u.get("completion_tokens_details") or {}
            acc, rej = d.get("accepted_prediction_tokens", 0), d.get("rejected_prediction_tokens", 0)
            return u["completion_tokens"], acc + rej, acc
        r = post(f"http://127.0.0.1:{port}/completion",
                 {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                  "cache_prompt": False})
        t = r.get("timings", {})
        return t.get("predicted_n", tokens), t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--draft-max", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kvserve-draft-flags", default="",
                    help="more flags for kvserve with its draft model (split on spaces)")
    ap.add_argument("--vocab", type=int, default=512, help="prompt ids are drawn from [3, vocab)")
    ap.add_argument("--log-dir", default="/tmp/speculative_vs_llama")
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    rng = random.Random(7)
    prompts = [[1] + [rng.randrange(3, a.vocab) for _ in range(15)] for _ in range(a.requests)]
    served = os.path.splitext(os.path.basename(a.target))[0]  # kvserve's default model name
    kv = [a.kvserve, "--model", a.target, "--threads", str(a.threads)]
    ll = [a.llama_server, "-m", a.target, "-t", str(a.threads), "-c", "2048", "-np", "1"]
    servers = [
        Server("kvserve", "kvserve", kv, served),
        Server("kvserve draft", "kvserve", kv + ["--draft_model", a.draft,
                                                 "--draft_max", str(a.draft_max)]
               + a.kvserve_draft_flags.split(), served),
        Server("llama.cpp", "llama", ll, served),
        Server("llama.cpp draft", "llama", ll + ["-md", a.draft, "-td", str(a.threads),
                                                 "--spec-type", "draft-simple",
                                                 "--spec-draft-n-max", str(a.draft_max)], served),
    ]
    results = {s.name: [] for s in servers}
    stats = {s.name: [0, 0] for s in servers}
    failed = {}  # llama.cpp server name -> why (a peer's failure ends its runs, not ours)
    for r in range(a.rounds):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            if s.name in failed:
                continue
            try:
                rate, d, acc = s.run(prompts, a.tokens, a.log_dir)
            except Exception as e:  # noqa: BLE001 - any peer failure is reported, not fatal
                if s.kind != "llama":
                    raise
                failed[s.name] = str(e)
                print(f"round {r + 1}: {s.name}: failed: {e} (log in {a.log_dir})",
                      file=sys.stderr, flush=True)
                continue
            results[s.name].append(rate)
            stats[s.name][0] += d
            stats[s.name][1] += acc
            print(f"round {r + 1}: {s.name}: {rate:.1f} tokens/s", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"target {a.target}, draft {a.draft}, draft max {a.draft_max}, {a.tokens} tokens, "
          f"{a.threads} threads, medians of {a.rounds} rounds x {a.requests} requests")
    print("| server | plain tokens/s | with draft tokens/s | speedup | acceptance |")
    print("|---|---|---|---|---|")
    for name in ("kvserve", "llama.cpp"):
        if name not in med or name + " draft" not in med:
            why = failed.get(name) or failed.get(name + " draft")
            print(f"| {name} | failed: {why} | | | |")
            continue
        d, acc = stats[name + " draft"]
        print(f"| {name} | {med[name]:.1f} | {med[name + ' draft']:.1f} | "
              f"{med[name + ' draft'] / med[name]:.2f}x | {acc / d if d else 0:.2f} |")
    if "llama.cpp draft" in med:
        print(f"kvserve with draft / llama.cpp with draft: "
              f"{med['kvserve draft'] / med['llama.cpp draft']:.2f}x")


if __name__ == "__main__":
    main()
