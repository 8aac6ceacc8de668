#!/usr/bin/env bash
# Tokenizer throughput of `kvserve-bench tokenize` against llama.cpp's llama-tokenize on the
# same 1 MiB mixed-language text (bench/make_tokenizer_text.py), for the Llama 3 and
# Qwen vocabularies of models/vocab (models/fetch-vocab.sh). Both are timed the same
# way, as whole command-line runs that print every id: the wall time on the 1 MiB
# text minus the wall time on a 1-byte text (which leaves out loading and start-up),
# median of RUNS runs each, interleaved. Also checks that both print the same ids.
# Usage: bench/tokenizer_compare.sh BUILD_DIR LLAMA_CPP_BIN_DIR [RUNS]
set -euo pipefail

build="$1"
llama_bin="$2"
runs="${3:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
vocab_dir="$here/../models/vocab"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 "$here/make_tokenizer_text.py" "$vocab_dir" "$work/text.txt"
printf 'x' > "$work/tiny.txt"
bytes=$(stat -c %s "$work/text.txt")

# Seconds of one run of "$@" (output discarded).
wall() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > /dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

kv() { "$build/bench/kvserve-bench" tokenize --model "$1" --file "$2" --no-bos; }
# llama-tokenize parses special tokens by default; kvserve-bench tokenize does not.
ll() { "$llama_bin/llama-tokenize" -m "$1" -f "$2" --ids --log-disable --no-bos --no-parse-special --no-escape; }

for name in llama-bpe qwen2; do
  vocab="$vocab_dir/ggml-vocab-$name.gguf"
  # Same ids? (llama-tokenize prints "[1, 2]", kvserve-bench tokenize "[1,2]")
  if [ "$(kv "$vocab" "$work/text.txt" | tr -d ' ')" != "$(ll "$vocab" "$work/text.txt" | tail -1 | tr -d ' ')" ]; then
    echo "$name: ids differ between kvserve-bench tokenize and llama-tokenize" >&2
  fi
  : > "$work/kv_full"; : > "$work/kv_tiny"; : > "$work/ll_full"; : > "$work/ll_tiny"
  for _ in $(seq "$runs"); do
    wall kv "$vocab" "$work/text.txt" >> "$work/kv_full"
    wall ll "$vocab" "$work/text.txt" >> "$work/ll_full"
    wall kv "$vocab" "$work/tiny.txt" >> "$work/kv_tiny"
    wall ll "$vocab" "$work/tiny.txt" >> "$work/ll_tiny"
  done
  kvf=$(median < "$work/kv_full"); kvt=$(median < "$work/kv_tiny")
  llf=$(median < "$work/ll_full"); llt=$(median < "$work/ll_tiny")
  kv_mbs=$(echo "$bytes / 1000000 / ($kvf - $kvt)" | bc -l)
  ll_mbs=$(echo "$bytes / 1000000 / ($llf - $llt)" | bc -l)
  printf '%s: kvserve %.2f MB/s (run %.3f s, load %.3f s), llama.cpp %.2f MB/s (run %.3f s, load %.3f s), ratio %.2f\n' \
    "$name" "$kv_mbs" "$kvf" "$kvt" "$ll_mbs" "$llf" "$llt" "$(echo "$kv_mbs / $ll_mbs" | bc -l)"
done
