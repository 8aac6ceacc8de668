#!/usr/bin/env python3
"""Table of bench/peer_compare.sh results: per model, the median over rounds of each
figure (min-max over rounds in brackets) and of the per-round ratios. Batch-1 decode is
held against two bandwidth figures: `kvserve-bench backend`'s paired probe (256 MiB before each
repeat) and its 1 GiB probe at the start of the run.

Usage: bench/peer_summary.py OUT_DIR
"""
import glob
import json
import os
import re
import statistics
import sys


def kvserve(path):
    fig = {}
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if m["test"] == "bandwidth":
                fig["probe"] = m["median"]
                continue
            if m["backend"] != "cpu_blas":
                continue
            if m["test"] == "prefill":
                fig["prefill"] = m["median"]
            elif m["test"] == "decode" and m["batch"] == 1:
                fig["b1"] = m["median"]
                fig["bound"] = m["fraction_of_bound"]
                fig["weight_gbs"] = m["weight_gbs"]
            elif m["test"] == "decode" and m["batch"] == 16:
                fig["b16"] = m["median"]
    return fig


def llama(prefix):
    fig = {}
    with open(prefix + "-bench.json") as f:
        for e in json.load(f):
            if e["n_prompt"] > 0 and e["n_gen"] == 0:
                fig["pp"] = e["avg_ts"]
            elif e["n_gen"] > 0 and e["n_prompt"] == 0:
                fig["tg"] = e["avg_ts"]
    with open(prefix + "-batched.jsonl") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            fig["tg_pl%d" % e["pl"]] = e["speed_tg"]
    return fig


def cell(values, fmt="%.1f"):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt % med
    return (fmt + " (" + fmt + "-" + fmt + ")") % (med, min(values), max(values))


def main():
    out = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "r*-*-kvserve.json"))):
        m = re.match(r"r(\d+)-(.*)-kvserve\.json$", os.path.basename(path))
        rnd, name = int(m.group(1)), m.group(2)
        try:
            k = kvserve(path)
            l = llama(os.path.join(out, "r%d-%s-llama" % (rnd, name)))
        except (OSError, KeyError, ValueError) as e:
            print("skipping round %d of %s: %s" % (rnd, name, e), file=sys.stderr)
            continue
        runs.setdefault(name, []).append((k, l))
    print("| model | rounds | kvserve prefill 512 | llama.cpp pp512 | ratio | kvserve decode b1 "
          "| % of paired bound | % of 1 GiB probe | llama.cpp tg | ratio | kvserve b16 | b16 / b1 "
          "| llama.cpp b16 (batched-bench) | its b16 / b1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rs in runs.items():
        col = lambda f: [f(k, l) for k, l in rs]
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, len(rs),
            cell(col(lambda k, l: k["prefill"])), cell(col(lambda k, l: l["pp"])),
            cell(col(lambda k, l: k["prefill"] / l["pp"]), "%.2fx"),
            cell(col(lambda k, l: k["b1"])),
            cell(col(lambda k, l: 100 * k["bound"]), "%.0f%%"),
            cell(col(lambda k, l: 100 * k["weight_gbs"] / k["probe"]), "%.0f%%"),
            cell(col(lambda k, l: l["tg"])),
            cell(col(lambda k, l: k["b1"] / l["tg"]), "%.2fx"),
            cell(col(lambda k, l: k["b16"])),
            cell(col(lambda k, l: k["b16"] / k["b1"]), "%.1fx"),
            cell(col(lambda k, l: l.get("tg_pl16", 0))),
            cell(col(lambda k, l: l.get("tg_pl16", 0) / l["tg_pl1"] if l.get("tg_pl1") else 0),
                 "%.1fx")))


if __name__ == "__main__":
    main()
