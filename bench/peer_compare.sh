#!/usr/bin/env bash
# kvserve against llama.cpp and ik_llama.cpp on the same GGUF files, rounds alternated
# (round r starts with program r mod N of kvserve and the peers given, then the rest in
# order), raw results kept for bench/peer_summary.py, which prints the table.
# The peers are built beside the project by hand (../shared/PEERS.md); this script only
# runs their binaries, found by environment:
#   LLAMA_CPP_BIN     folder with llama.cpp's llama-bench and llama-batched-bench
#   IK_LLAMA_CPP_BIN  the same for ik_llama.cpp
# At least one must be set; an unset one is left out of every round.
#   KVSERVE_BENCH_ARGS  extra flags for kvserve-bench backend, split on spaces (for example
#                       "--kernel_level avx2" to measure the AVX2 kernels on an AVX-512 machine
#                       beside peers built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON)
#
# Usage: [LLAMA_CPP_BIN=DIR] [IK_LLAMA_CPP_BIN=DIR] bench/peer_compare.sh BUILD_DIR OUT_DIR ROUNDS MODEL.gguf...
# Per model and round:
#   kvserve-bench backend --backends cpu_blas --threads 2 --repeats 3 --batches 1,16 --json
#   llama-bench -p 512 -n N -t 2 -r 3 -o json                     (N = 64, 32 above 1 GB)
#   llama-batched-bench -c 2048 -npp 4 -ntg 32 -npl 1,16 -t 2 --output-format jsonl
# Decode steps: 32 per kvserve repeat (16 for files above 1 GB, as llama-bench's -n).
# Files: OUT_DIR/r<round>-<model>-kvserve.json, -<peer>-bench.json, -<peer>-batched.jsonl.
# A peer tool that fails (for example llama.cpp built with GGML_NATIVE on a CPU whose
# hypervisor advertises AMX without enabling it: SIGILL on quantized files) is reported,
# its figures are left out and the run goes on; kvserve failing stops the run.
set -euo pipefail
if (($# < 4)); then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
build="$1"; out="$2"; rounds="$3"; shift 3
declare -A bin=()
[ -n "${LLAMA_CPP_BIN:-}" ] && bin[llama.cpp]="$LLAMA_CPP_BIN"
[ -n "${IK_LLAMA_CPP_BIN:-}" ] && bin[ik_llama.cpp]="$IK_LLAMA_CPP_BIN"
programs=(kvserve)
for peer in llama.cpp ik_llama.cpp; do
  [ -n "${bin[$peer]:-}" ] || continue
  for tool in llama-bench llama-batched-bench; do
    if [ ! -x "${bin[$peer]}/$tool" ]; then
      echo "peer_compare: $peer: no executable ${bin[$peer]}/$tool" >&2
      exit 2
    fi
  done
  programs+=("$peer")
done
if ((${#programs[@]} < 2)); then
  echo "peer_compare: set LLAMA_CPP_BIN and/or IK_LLAMA_CPP_BIN (folders with llama-bench)" >&2
  exit 2
fi
mkdir -p "$out"
out="$(realpath "$out")"
rm -f "$out/failures.txt"
{
  lscpu | grep -E "Model name|^CPU\(s\)|Flags" || true
  for peer in "${!bin[@]}"; do echo "$peer: ${bin[$peer]}"; done
} > "$out/cpu.txt"

kv() {  # model file, output
  local steps=32
  [ "$(stat -c %s "$1")" -gt 1000000000 ] && steps=16
  "$build/bench/kvserve-bench" backend --model "$1" --backends cpu_blas --threads 2 --repeats 3 \
    --batches 1,16 --decode-tokens "$steps" --json ${KVSERVE_BENCH_ARGS:-} > "$2" 2> "$2.log"
}
peer() {  # peer name, model file, output prefix
  local n=64 dir model prefix
  dir="$(realpath "${bin[$1]}")" model="$(realpath "$2")" prefix="$(realpath -m "$3")"
  [ "$(stat -c %s "$model")" -gt 1000000000 ] && n=32
  # Run from OUT_DIR: ik_llama.cpp's tools write a llama.log into the working directory.
  (
    cd "$out"
    peer_tool "$1" "$model" "$prefix-bench.json" "$prefix-bench.log" \
      "$dir/llama-bench" -m "$model" -p 512 -n "$n" -t 2 -r 3 -o json
    peer_tool "$1" "$model" "$prefix-batched.jsonl" "$prefix-batched.log" \
      "$dir/llama-batched-bench" -m "$model" -c 2048 -npp 4 -ntg 32 -npl 1,16 -t 2 \
      --output-format jsonl
  )
}
# A peer's tool that fails (a crash, a model it cannot load) costs only its own figures:
# its output is removed, so the summary leaves them out, and the failure is reported on
# stderr and in OUT_DIR/failures.txt (which peer_summary.py prints under the table).
peer_tool() {  # peer name, model file, output file, log file, command...
  local name="$1" model="$2" output="$3" log="$4" status=0 why
  shift 4
  "$@" > "$output" 2> "$log" || status=$?
  ((status == 0)) && return 0
  why="exit status $status"
  if ((status > 128)); then
    why="killed by SIG$(kill -l $((status - 128)) 2> /dev/null || echo $((status - 128)))"
  fi
  rm -f "$output"
  echo "$name $(basename "$1"): $why on $(basename "$model") (log: $log)" \
    | tee -a "$out/failures.txt" | sed 's/^/peer_compare: /' >&2
}

for ((r = 1; r <= rounds; r++)); do
  for m in "$@"; do
    name="$(basename "$m" .gguf)"
    echo "$(date -u +%H:%M:%S) round $r $name (load $(cut -d' ' -f1 /proc/loadavg))"
    for ((i = 0; i < ${#programs[@]}; i++)); do
      p="${programs[$(((r - 1 + i) % ${#programs[@]}))]}"
      if [ "$p" = kvserve ]; then
        kv "$m" "$out/r$r-$name-kvserve.json"
      else
        peer "$p" "$m" "$out/r$r-$name-$p"
      fi
    done
  done
done
echo "$(date -u +%H:%M:%S) done"
