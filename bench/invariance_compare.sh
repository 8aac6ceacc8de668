#!/usr/bin/env bash
# The cost of batch invariance (kvserve --batch-invariant, the default): `kvserve-bench backend` on
# the s110m files with it on and off, alternated (and which goes first, by round), one JSON
# file per run for
# bench/invariance_summary.py. LEVEL "best" measures the CPU's best kernel level with
# OpenBLAS's own core; "avx2" forces the AVX2 kernels and OpenBLAS's Haswell core (an
# AVX2 machine's paths, measured on a better CPU).
#
# usage: [PRESET=tl1b] [DECODE_TOKENS=16] bench/invariance_compare.sh BUILD_DIR MODELS_DIR OUT ROUNDS LEVEL
#   MODELS_DIR holds $PRESET-{f32,bf16,q8_0,q4_0,q4_k_m}.gguf (kvserve-bench mkmodel --preset
#   $PRESET; default s110m)
set -euo pipefail
build=$1; models=$2; out=$3; rounds=$4; level=$5
preset=${PRESET:-s110m}; decode_tokens=${DECODE_TOKENS:-32}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for f in f32 bf16 q8_0 q4_0 q4_k_m; do
    # Odd rounds run with invariance first, even rounds without it first.
    order="true false"
    if [ $((r % 2)) -eq 0 ]; then order="false true"; fi
    for inv in $order; do
      if [ "$level" = avx2 ]; then
        envs=(OPENBLAS_CORETYPE=Haswell); extra=(--kernel-level avx2)
      else
        envs=(-u OPENBLAS_CORETYPE); extra=()
      fi
      env "${envs[@]}" "$build/bench/kvserve-bench" backend --model "$models/$preset-$f.gguf" \
        --backends cpu_blas --threads 2 --repeats 3 --batches 1,16 --decode-tokens "$decode_tokens" \
        --bandwidth-mib 0 --paired-probe-mib 0 --json --batch-invariant="$inv" "${extra[@]}" \
        > "$out/$f-$inv-$r.json" 2>/dev/null
    done
  done
done
