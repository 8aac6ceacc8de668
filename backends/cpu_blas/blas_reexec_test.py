#!/usr/bin/env python3
"""End to end test of the OpenBLAS core re-exec (backends/cpu_blas/blas_startup.h) with
blas_reexec_probe: a fallback re-executes once with the best core and the same argv, an
explicit OPENBLAS_CORETYPE wins, --blas-reexec=false keeps OpenBLAS's choice, and the
marker stops a second re-exec."""
import os
import subprocess
import sys

PROBE = sys.argv[1]
GENERATION = {"prescott": 1, "core2": 2, "nehalem": 3, "sandybridge": 4, "haswell": 5,
              "zen": 5, "skylakex": 6, "cooperlake": 6}


def run(args, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "KVSERVE_BLAS_REEXEC")}
    env.update(env_extra or {})
    proc = subprocess.run([PROBE] + args, env=env, capture_output=True, text=True, timeout=30,
                          check=True)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"expected one line (one process printing), got {proc.stdout!r}"
    fields = dict(kv.split("=", 1) for kv in lines[0].split(" ", 4))
    log = [l for l in proc.stderr.splitlines() if l.startswith("blas_reexec_probe:")]
    assert len(log) == 1, f"expected one log line, got {proc.stderr!r}"
    return fields, log[0]


def main():
    # No setting: the process ends up on a core of the best one's generation for this CPU
    # (OpenBLAS's own choice where it is one, else after a re-exec): OpenBLAS 0.3.21 picks
    # SkylakeX where the best is Cooperlake on an AVX512_BF16 Xeon it does not know, whose
    # sgemm is the same.
    f, log = run(["a", "b c"])
    best = f["best"]
    assert GENERATION.get(f["core"].lower(), 0) == GENERATION[best.lower()], (f, log)
    assert f["args"] == "a b c" and f["degraded"] == "0", (f, log)
    if GENERATION[best.lower()] == 1:
        print("ok: best core is Prescott, nothing older to fall back from")
        return

    # A fallback (pretended): one re-exec with OPENBLAS_CORETYPE=best and the same argv.
    f, log = run(["--pretend-chosen-core=Prescott", "x", "--", "--y"])
    assert f["core"] == best and f["coretype"] == best, (f, log)
    assert f["args"] == "x --y" and f["degraded"] == "0", (f, log)
    assert f"OpenBLAS had chosen Prescott, re-executed with OPENBLAS_CORETYPE={best}" in log, log

    # The same with --blas-reexec=false: OpenBLAS's choice is kept and called degraded.
    f, log = run(["--pretend-chosen-core=Prescott", "--blas-reexec=false"])
    assert f["coretype"] == "-" and f["degraded"] == "1", (f, log)
    assert "warning:" in log and "--blas_reexec=false" in log, log

    # An explicit user setting always wins (and is reported as degraded).
    f, log = run([], {"OPENBLAS_CORETYPE": "Prescott"})
    assert f["core"] == "Prescott" and f["coretype"] == "Prescott", (f, log)
    assert f["degraded"] == "1" and "set by the user, kept" in log, (f, log)
    # Even with a stale marker naming another core.
    f, log = run(["--pretend-chosen-core=Prescott"],
                 {"OPENBLAS_CORETYPE": "Nehalem", "KVSERVE_BLAS_REEXEC": "Prescott>Haswell"})
    assert f["core"] == "Nehalem" and "set by the user, kept" in log, (f, log)

    # The marker with our own setting: no second exec even if the core looks old.
    f, log = run([], {"OPENBLAS_CORETYPE": "Haswell", "KVSERVE_BLAS_REEXEC": "Prescott>Haswell"})
    assert f["core"] == "Haswell" and "re-executed with OPENBLAS_CORETYPE=Haswell" in log, (f, log)
    print("ok")


if __name__ == "__main__":
    main()
