#!/usr/bin/env python3
"""Table of bench/peer_compare.sh results: per model, kvserve and each peer found in OUT_DIR
(llama.cpp, ik_llama.cpp) side by side, the median over rounds of each figure, and kvserve's
ratio to the better peer of the same round (median over rounds, min-max in brackets).
Batch-1 decode is also held against two bandwidth figures: `kvserve-bench backend`'s paired
probe (256 MiB before each repeat) and its 1 GiB probe at the start of the run.

Peer results are read from r<round>-<model>-<peer>-bench.json (llama-bench -o json) and
-batched.jsonl (llama-batched-bench --output-format jsonl: S_TG at 16 sequences; where that has
none, as from ik_llama.cpp's, which ignores the option, the markdown table in -batched.log); files of
the older one-peer layout (-llama-bench.json) count as llama.cpp. A round missing a figure
leaves that figure out of the round's ratio. The failures peer_compare.sh recorded
(OUT_DIR/failures.txt) are listed under the table.

Usage: bench/peer_summary.py OUT_DIR
"""
import glob
import json
import os
import re
import statistics
import sys

PEERS = ["llama.cpp", "ik_llama.cpp"]
PEER_FILE = {"llama.cpp": ["llama.cpp", "llama"], "ik_llama.cpp": ["ik_llama.cpp"]}


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
                fig["pp"] = m["median"]
            elif m["test"] == "decode" and m["batch"] == 1:
                fig["tg"] = m["median"]
                fig["bound"] = m["fraction_of_bound"]
                fig["weight_gbs"] = m["weight_gbs"]
            elif m["test"] == "decode" and m["batch"] == 16:
                fig["b16"] = m["median"]
    return fig


def peer(prefix):
    """llama-bench's pp512 and tg, batched-bench's S_TG at 16, those whose file is there
    ({} when none is)."""
    fig = {}
    if os.path.exists(prefix + "-bench.json"):
        with open(prefix + "-bench.json") as f:
            for e in json.load(f):
                if e["n_prompt"] > 0 and e["n_gen"] == 0:
                    fig["pp"] = e["avg_ts"]
                elif e["n_gen"] > 0 and e["n_prompt"] == 0:
                    fig["tg"] = e["avg_ts"]
    if os.path.exists(prefix + "-batched.jsonl"):
        with open(prefix + "-batched.jsonl") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    e = json.loads(line)
                    if e.get("pl") == 16:
                        fig["b16"] = e["speed_tg"]
    if "b16" not in fig and os.path.exists(prefix + "-batched.log"):
        b16 = batched_table_tg(prefix + "-batched.log", 16)
        if b16 is not None:
            fig["b16"] = b16
    return fig


def batched_table_tg(path, sequences):
    """S_TG of the row with B = `sequences` in llama-batched-bench's markdown table (what
    ik_llama.cpp prints, on stderr, whatever --output-format says); None when absent."""
    columns = None
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if "S_TG t/s" in cells and "B" in cells:
                columns = cells
            elif columns and len(cells) == len(columns):
                row = dict(zip(columns, cells))
                try:
                    if int(row["B"]) == sequences:
                        return float(row["S_TG t/s"])
                except ValueError:
                    continue
    return None


def median_cell(values, fmt="%.1f"):
    return fmt % statistics.median(values) if values else "-"


def ratio_cell(values):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return "%.2fx" % med
    return "%.2fx (%.2f-%.2f)" % (med, min(values), max(values))


def load(out):
    """{model: [(kvserve figures, {peer: figures}) per round]}, the peers seen."""
    runs, seen = {}, set()
    for path in sorted(glob.glob(os.path.join(out, "r*-*-kvserve.json"))):
        m = re.match(r"r(\d+)-(.*)-kvserve\.json$", os.path.basename(path))
        rnd, name = int(m.group(1)), m.group(2)
        try:
            k = kvserve(path)
            peers = {}
            for p in PEERS:
                for stem in PEER_FILE[p]:
                    fig = peer(os.path.join(out, "r%d-%s-%s" % (rnd, name, stem)))
                    if fig:
                        peers[p] = fig
                        seen.add(p)
                        break
        except (OSError, KeyError, ValueError) as e:
            print("skipping round %d of %s: %s" % (rnd, name, e), file=sys.stderr)
            continue
        runs.setdefault(name, []).append((k, peers))
    return runs, [p for p in PEERS if p in seen]


def table(runs, peers):
    """The markdown table, one line per model."""
    names = " / ".join(["kvserve"] + peers)
    head = ["model", "rounds"]
    for what in ["prefill 512", "decode b1", "b16 aggregate"]:
        head += ["%s: %s" % (what, names), "vs better peer"]
        if what == "decode b1":
            head += ["% of paired bound", "% of 1 GiB probe"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, rs in sorted(runs.items()):
        row = [name, str(len(rs))]
        for key in ["pp", "tg", "b16"]:
            cells = [median_cell([k[key] for k, _ in rs if key in k])]
            for p in peers:
                cells.append(median_cell([ps[p][key] for _, ps in rs if key in ps.get(p, {})]))
            ratios = []
            for k, ps in rs:
                best = max([ps[p][key] for p in ps if key in ps[p]], default=0)
                if key in k and best > 0:
                    ratios.append(k[key] / best)
            row += [" / ".join(cells), ratio_cell(ratios)]
            if key == "tg":
                row.append(median_cell([100 * k["bound"] for k, _ in rs if "bound" in k], "%.0f%%"))
                row.append(median_cell([100 * k["weight_gbs"] / k["probe"] for k, _ in rs
                                        if "weight_gbs" in k and k.get("probe")], "%.0f%%"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    runs, peers = load(sys.argv[1])
    if not runs:
        print("no kvserve results in %s" % sys.argv[1], file=sys.stderr)
        sys.exit(1)
    print(table(runs, peers))
    failures = os.path.join(sys.argv[1], "failures.txt")
    if os.path.exists(failures):
        with open(failures) as f:
            lines = [line.strip() for line in f if line.strip()]
        if lines:
            print("\nLeft out (the peer's tool failed; bench/peer_compare.sh):")
            for line in lines:
                print("- " + line)


if __name__ == "__main__":
    main()
