#!/usr/bin/env bash
# kvserve against llama.cpp on the same GGUF files, rounds alternated (odd rounds run
# kvserve first, even rounds llama.cpp first), raw results kept for bench/peer_summary.py.
# llama.cpp is built beside the project by hand (../shared/PEERS.md); this script only
# runs its binaries.
#
# Usage: bench/peer_compare.sh BUILD_DIR LLAMA_BIN_DIR OUT_DIR ROUNDS MODEL.gguf...
# Per model and round:
#   kvserve-bench backend --backends cpu_blas --threads 2 --repeats 3 --batches 1,16 --json
#   llama-bench -p 512 -n N -t 2 -r 3 -o json                     (N = 64, 32 above 1 GB)
#   llama-batched-bench -c 2048 -npp 4 -ntg 32 -npl 1,16 -t 2 --output-format jsonl
# Decode steps: 32 per kvserve repeat (16 for files above 1 GB, as llama-bench's -n).
set -euo pipefail
build="$1"; llama="$2"; out="$3"; rounds="$4"; shift 4
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" > "$out/cpu.txt" || true

kv() {  # model file, output
  local steps=32
  [ "$(stat -c %s "$1")" -gt 1000000000 ] && steps=16
  "$build/bench/kvserve-bench" backend --model "$1" --backends cpu_blas --threads 2 --repeats 3 \
    --batches 1,16 --decode-tokens "$steps" --json > "$2" 2> "$2.log"
}
ll() {  # model file, output prefix
  local n=64
  [ "$(stat -c %s "$1")" -gt 1000000000 ] && n=32
  "$llama/llama-bench" -m "$1" -p 512 -n "$n" -t 2 -r 3 -o json > "$2-bench.json" 2> "$2-bench.log"
  "$llama/llama-batched-bench" -m "$1" -c 2048 -npp 4 -ntg 32 -npl 1,16 -t 2 \
    --output-format jsonl > "$2-batched.jsonl" 2> "$2-batched.log"
}

for ((r = 1; r <= rounds; r++)); do
  for m in "$@"; do
    name="$(basename "$m" .gguf)"
    echo "$(date -u +%H:%M:%S) round $r $name (load $(cut -d' ' -f1 /proc/loadavg))"
    if ((r % 2 == 1)); then
      kv "$m" "$out/r$r-$name-kvserve.json"
      ll "$m" "$out/r$r-$name-llama"
    else
      ll "$m" "$out/r$r-$name-llama"
      kv "$m" "$out/r$r-$name-kvserve.json"
    fi
  done
done
echo "$(date -u +%H:%M:%S) done"
