#!/usr/bin/env python3
"""Smoke test: kvserve-bench mkmodel --preset tiny, then kvserve-bench backend --json on it
with tiny sizes; every stdout line must be a JSON object with the documented fields. Then
kvserve-bench cache-reuse on the same file fetches the whole history.

Usage: bench_smoke_test.py KVSERVE_BENCH"""
import json
import os
import subprocess
import sys
import tempfile

REQUIRED = {"model": str, "backend": str, "dtype": str, "threads": int, "test": str,
            "batch": int, "tokens_per_s": (int, float), "bytes_per_token": int,
            "bandwidth_gbs": (int, float), "repeats": int, "median": (int, float),
            "min": (int, float), "max": (int, float), "kernel_level": str, "blas_core": str}


def main():
    mkmodel = [sys.argv[1], "mkmodel"]
    bench = [sys.argv[1], "backend"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.gguf")
        subprocess.run([*mkmodel, "--preset", "tiny", "--dtype", "f32", "--out", path, "--seed", "7"],
                       check=True)
        # An explicit OPENBLAS_CORETYPE is kept, logged, and reported on every line.
        env = {k: v for k, v in os.environ.items() if k != "KVSERVE_BLAS_REEXEC"}
        env["OPENBLAS_CORETYPE"] = "Prescott"
        pinned = subprocess.run([*bench, "--model", path, "--backends", "cpu_blas", "--repeats", "1",
                                 "--prompt-tokens", "8", "--decode-tokens", "2", "--batches", "1",
                                 "--bandwidth-mib", "0", "--json"],
                                check=True, capture_output=True, text=True, env=env)
        assert "OPENBLAS_CORETYPE=Prescott set by the user, kept" in pinned.stderr, pinned.stderr
        for line in pinned.stdout.splitlines():
            assert json.loads(line)["blas_core"] == "Prescott", line
        out = subprocess.run([*bench, "--model", path, "--backends", "reference,cpu_blas",
                              "--threads", "2", "--repeats", "1", "--prompt-tokens", "16",
                              "--reference-prompt-tokens", "16", "--decode-tokens", "3",
                              "--reference-batches", "1,4",
                              "--batches", "1,4", "--bandwidth-mib", "16", "--bandwidth-passes", "2",
                              "--paired-probe-mib", "16",
                              "--json"], check=True, capture_output=True, text=True).stdout
        # cache-reuse: the next turn on a fresh engine fetches every whole block of the
        # history from a real kvserve-cache (the bench sizes its pool so that the fetch fits
        # the share of the pool a fetch may reserve; it fails when part is recomputed).
        reuse = subprocess.run([sys.argv[1], "cache-reuse", "--model", path, "--history", "192",
                                "--repeats", "1", "--threads", "1", "--json"],
                               check=True, capture_output=True, text=True).stdout
        row = json.loads(reuse.splitlines()[0])
        assert row["cached_tokens_remote"] == 192, row
    lines = [json.loads(line) for line in out.splitlines()]
    for obj in lines:
        for field, kind in REQUIRED.items():
            assert field in obj, f"missing {field} in {obj}"
            assert isinstance(obj[field], kind), f"{field} has type {type(obj[field])} in {obj}"
        assert obj["test"] in ("prefill", "decode", "bandwidth"), obj
        assert obj["model"] == "tiny.gguf", obj
    tests = [(o["backend"], o["test"], o["batch"]) for o in lines if o["test"] != "bandwidth"]
    assert ("reference", "prefill", 1) in tests, tests
    assert ("reference", "decode", 1) in tests, tests
    assert ("reference", "decode", 4) in tests, tests
    bandwidth = [o for o in lines if o["test"] == "bandwidth"]
    assert len(bandwidth) == 1 and bandwidth[0]["bandwidth_gbs"] > 0, bandwidth
    for o in lines:
        if o["test"] == "bandwidth":
            continue
        assert o["tokens_per_s"] > 0 and o["min"] <= o["median"] <= o["max"], o
        assert o["blas_core"] and o["kernel_level"] in ("avx512bf16", "avx512vnni", "avx512", "avx_vnni", "avx2", "scalar"), o
        assert o["backend"] != "reference" or o["kernel_level"] == "scalar", o
        assert o["dtype"] == "f32" and o["threads"] == 2 and o["repeats"] == 1, o
        if o["test"] == "decode":
            # Paired probes: the median probe of the repeats, and the median of the ratios.
            assert o["paired"] == 1 and o["bandwidth_gbs"] > 0 and o["fraction_of_bound"] > 0, o
        else:
            assert o["paired"] == 0 and o["bandwidth_gbs"] == bandwidth[0]["bandwidth_gbs"], o
        # tiny: 2 layers x (q 64x64 + k,v 32x64 + o 64x64 + 3 x 128x64) + lm head 512x64 + one row, f32.
        assert o["bytes_per_token"] == 4 * (2 * (64 * 64 * 2 + 32 * 64 * 2 + 3 * 128 * 64) + 512 * 64 + 64), o
    print(f"ok: {len(lines)} JSON lines")


if __name__ == "__main__":
    main()
