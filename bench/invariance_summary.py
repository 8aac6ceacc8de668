"""Summarizes bench/invariance_compare.sh's runs: per file and measurement, the median over
rounds of `kvserve-bench backend`'s medians with batch invariance on and off, and their ratio.

Usage: python3 bench/invariance_summary.py OUT
"""
import collections
import glob
import json
import statistics
import sys


def main(out):
    vals = collections.defaultdict(list)
    for path in glob.glob(out + "/*.json"):
        name = path.rsplit("/", 1)[1][:-len(".json")]
        f, inv, _ = name.rsplit("-", 2)
        for line in open(path):
            if line.startswith("{"):
                m = json.loads(line)
                preset = m["model"].split("-")[0]
                vals[((preset + " " + f, m["test"], m["batch"]), inv)].append(m["median"])
    print("| file | measurement | invariant (tok/s) | sgemm allowed (tok/s) | ratio |")
    print("|---|---|---:|---:|---:|")
    for key in sorted({k for k, _ in vals}):
        on, off = vals.get((key, "true")), vals.get((key, "false"))
        if not on or not off:
            continue
        a, b = statistics.median(on), statistics.median(off)
        test = "prefill 512" if key[1] == "prefill" else "decode b%d" % key[2]
        print("| %s | %s | %.1f | %.1f | %.2f |" % (key[0], test, a, b, a / b))


if __name__ == "__main__":
    main(sys.argv[1])
