#!/usr/bin/env bash
# The cost of batch invariance (kvserve --batch-invariant, the default): kvserve-bench on
# the s110m files with it on and off, alternated, one JSON file per run for
# bench/invariance_summary.py. LEVEL "best" measures the CPU's best kernel level with
# OpenBLAS's own core; "avx2" forces the AVX2 kernels and OpenBLAS's Haswell core (an
# AVX2 machine's paths, measured on a better CPU).
#
# usage: bench/invariance_compare.sh BUILD_DIR MODELS_DIR OUT ROUNDS LEVEL
#   MODELS_DIR holds s110m-{f32,bf16,q8_0,q4_0,q4_k_m}.gguf (kvserve-mkmodel --preset s110m)
set -euo pipefail
build=$1; models=$2; out=$3; rounds=$4; level=$5
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for f in f32 bf16 q8_0 q4_0 q4_k_m; do
    for inv in true false; do
      if [ "$level" = avx2 ]; then
        envs=(OPENBLAS_CORETYPE=Haswell); extra=(--kernel-level avx2)
      else
        envs=(-u OPENBLAS_CORETYPE); extra=()
      fi
      env "${envs[@]}" "$build/bench/kvserve-bench" --model "$models/s110m-$f.gguf" \
        --backends cpu_blas --threads 2 --repeats 3 --batches 1,16 --decode-tokens 32 \
        --bandwidth-mib 0 --paired-probe-mib 0 --json --batch-invariant="$inv" "${extra[@]}" \
        > "$out/$f-$inv-$r.json" 2>/dev/null
    done
  done
done
