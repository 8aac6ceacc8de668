#!/usr/bin/env python3
"""Prints every computed table of docs/scaling.md (arithmetic only; no measurement).

The measured inputs (prefill tok/s, Redis MEMORY USAGE, loopback TCP) are constants
below, each with the command that produced it in docs/scaling.md. Usage:
    python3 scripts/scaling_figures.py
"""

import math

HEADER = 128  # cache/block_record.h kBlockRecordHeaderBytes
BT = 16  # tokens per block
GIB = 1 << 30
TB = 10**12
TRACE_HISTORY = 12035 + 343  # Mooncake conversation trace: average input + output

# name: (layers, kv_heads, head_dim, context used for a session, non-embedding params)
# Non-embedding params = per layer Q, K, V, O + gate, up, down (norms and biases ignored).
MODELS = {
    "Llama 3.1 8B": (32, 8, 128, TRACE_HISTORY, 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)),
    "Qwen 2.5 7B": (28, 4, 128, TRACE_HISTORY, 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944)),
    "s110m": (12, 12, 64, 2048, 12 * (4 * 768 * 768 + 3 * 768 * 2048)),
    "stories260K": (5, 4, 8, 496, 5 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172)),
}
DTYPE_BYTES = {"f16": 2, "f32": 4}

# Measured here (docs/scaling.md, "Measured on this machine"): `kvserve-bench backend` cpu_blas prefill,
# 2 threads, median of 3 round medians. s110m at 512 tokens is the FLOP-rate reference for
# the 8B extrapolation; s110m at 2048 and stories260K at 496 are used directly.
PREFILL_512_S110M = {"f32": 853.1, "f16": 822.9}
PREFILL_DIRECT = {("s110m", "f32"): 601.8, ("s110m", "f16"): 579.2,
                  ("stories260K", "f32"): 13765.1, ("stories260K", "f16"): 11153.0}
# Measured: Redis 7.0.15 (jemalloc 5.3.0) MEMORY USAGE of one key "kvb:" + 64 hex chars
# holding one record of each size.
REDIS_USAGE = {2097344: 2621560, 4194496: 5243000, 917696: 1048696, 1835200: 2097272,
               590016: 655480, 1179840: 1310840, 10432: 12408, 20672: 24696}

LINKS = [("1 GbE", 1e9 / 8, 0.25e-3), ("10 GbE", 10e9 / 8, 0.25e-3), ("25 GbE", 25e9 / 8, 0.25e-3),
         ("loopback", 1.19e9, 0.1e-3)]  # bytes/s (line rate; loopback measured), latency per call
CALLS = 2  # Lookup + FetchBlocks
INDEX_BYTES = 128  # memory tier: per-block index/LRU overhead (estimate; tier not written yet)
SCALE_32 = 16  # a 32-vCPU node, assuming prefill scales linearly from 2 vCPUs (assumption)


def per_token(m, dt):
    layers, kvh, hd, *_ = MODELS[m]
    return 2 * layers * kvh * hd * DTYPE_BYTES[dt]


def record(m, dt):
    return HEADER + 4 * BT + BT * per_token(m, dt)


def blocks(m):
    return MODELS[m][3] // BT


def session_record(m):
    return 4 * MODELS[m][3] + 256  # token ids + turn ends, ids, owner (estimate)


def prefill_tps(m, dt):
    if (m, dt) in PREFILL_DIRECT:
        return PREFILL_DIRECT[(m, dt)], "measured"
    ref_flops = 2 * MODELS["s110m"][4]
    return PREFILL_512_S110M[dt] * ref_flops / (2 * MODELS[m][4]), "extrapolated"


def fmt(x, nd=0):
    return f"{x:,.{nd}f}"


def main():
    rows = [(m, dt) for m in MODELS for dt in DTYPE_BYTES]

    print("## 1. KV bytes per token and per block record\n")
    print("| model | layers | KV heads | head dim | KV bytes/token | payload/block | record/block | header+ids share | Redis MEMORY USAGE/block (measured) | Redis overhead |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m, dt in rows:
        L, kvh, hd, *_ = MODELS[m]
        r = record(m, dt)
        ru = REDIS_USAGE[r]
        print(f"| {m} {dt} | {L} | {kvh} | {hd} | {fmt(per_token(m, dt))} | {fmt(BT * per_token(m, dt))} | "
              f"{fmt(r)} | {(HEADER + 4 * BT) / r:.2%} | {fmt(ru)} | +{ru / r - 1:.1%} |")

    print("\n## 2. Sessions per tier\n")
    print("| model | history tokens | blocks | block records | 1 GiB memory | 64 GiB memory | 64 GiB Redis maxmemory | 1 TB disk |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")

    def cnt(cap, per):
        n = cap / per
        return f"{n:.2f}" if n < 10 else f"{int(n):,}"

    for m, dt, hist in [(m, dt, TRACE_HISTORY) for m, dt in rows] + \
            [(m, dt, MODELS[m][3]) for m, dt in rows if MODELS[m][3] != TRACE_HISTORY]:
        b, r, s = hist // BT, record(m, dt), 4 * hist + 256
        mem = b * (r + INDEX_BYTES) + s
        red = b * REDIS_USAGE[r] + s
        disk = b * (math.ceil(r / 4096) * 4096) + s
        print(f"| {m} {dt} | {fmt(hist)} | {b} | {b * r / 1e6:,.2f} MB | "
              f"{cnt(GIB, mem)} | {cnt(64 * GIB, mem)} | {cnt(64 * GIB, red)} | {cnt(TB, disk)} |")

    print("\n## 3a. Fetch bandwidth per turn rate\n")
    print("| model | bytes fetched per turn | Gbit/s at 1 turn/s | turns/s that fill 1 GbE | 10 GbE | 25 GbE |")
    print("|---|---:|---:|---:|---:|---:|")
    for m, dt in rows:
        by = blocks(m) * record(m, dt)
        print(f"| {m} {dt} | {by / 1e6:,.2f} MB | {by * 8 / 1e9:,.3f} | "
              + " | ".join(f"{bw / by:,.2f}" for _, bw, _ in LINKS[:3]) + " |")

    print("\n## 3b. Fetch or recompute\n")
    print("| model | prefill tok/s (2 vCPU) | recompute s | transfer s: 1 GbE | 10 GbE | 25 GbE | loopback | break-even link, 2 vCPU | break-even, 32 vCPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m, dt in rows:
        by = blocks(m) * record(m, dt)
        toks = blocks(m) * BT
        tps, how = prefill_tps(m, dt)
        t_re = toks / tps
        cells = [f"{by / bw + CALLS * lat:.3g}" for _, bw, lat in LINKS]
        be = [by * 8 / (t - CALLS * 0.25e-3) / 1e9 if t > CALLS * 0.25e-3 else math.inf
              for t in (t_re, t_re / SCALE_32)]
        print(f"| {m} {dt} | {tps:,.1f} ({how}) | {t_re:,.3g} | " + " | ".join(cells)
              + f" | {be[0] * 1e3:,.3g} Mbit/s | {be[1] * 1e3:,.0f} Mbit/s |")

    print("\n## 4. Redis Cluster shards (24 GiB maxmemory per primary, 1 replica)\n")
    shard = 24 * GIB
    print("| model | Redis bytes per session (records + session record) | sessions per shard | primaries for 1,000 | for 10,000 | Redis TB for 10,000 | nodes for 10,000 (×2) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m, dt in rows:
        red = blocks(m) * REDIS_USAGE[record(m, dt)] + session_record(m)
        per = shard // red
        p1, p10 = math.ceil(1000 / per), math.ceil(10000 / per)
        print(f"| {m} {dt} | {red / 1e6:,.2f} MB | {per:,} | {p1:,} | {p10:,} | {10000 * red / 1e12:,.2f} | {2 * p10:,} |")

    print("\n## 4b. Mooncake's hour (3,600 s) through one cache, 16-token blocks = 32 per 512-token trace block\n")
    reqs, blocks_all, distinct = 12031, 288500, 182790
    reused = (blocks_all - distinct) * 32 / 3600  # 16-token blocks/s fetchable (unlimited cache)
    new = distinct * 32 / 3600  # 16-token blocks/s computed and stored
    print(f"requests/s {reqs / 3600:.2f}; fetchable blocks/s {reused:,.0f}; new blocks/s {new:,.0f}; "
          f"prefill of new tokens {new * BT:,.0f} tok/s\n")
    print("| model | fetch Gbit/s | store Gbit/s (before replication) | record TB of all distinct blocks | Redis TB |")
    print("|---|---:|---:|---:|---:|")
    for m, dt in rows:
        r = record(m, dt)
        print(f"| {m} {dt} | {reused * r * 8 / 1e9:,.2f} | {new * r * 8 / 1e9:,.2f} | "
              f"{distinct * 32 * r / 1e12:,.2f} | {distinct * 32 * REDIS_USAGE[r] / 1e12:,.2f} |")


if __name__ == "__main__":
    main()
