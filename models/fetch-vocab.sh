#!/usr/bin/env bash
# Provides the vocabulary-only GGUF files and llama.cpp's tokenizer test texts and ids
# (model/vocab_conformance_test.cc, bench/tokenizer_bench.cc) in models/vocab/, checked
# against models/VOCAB_SHA256SUMS. Source: the mirror folder $KVSERVE_VOCAB_MIRROR
# (default ../shared/vocab relative to the repository; its README.md says where each
# file comes from). There is no public download for the Llama 3 and Qwen files, which
# were written for kvserve from npm tokenizer packages, so a missing mirror is an error.
# Usage: models/fetch-vocab.sh [DEST_DIR]   (default: models/vocab)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dest="${1:-$here/vocab}"
mirror="${KVSERVE_VOCAB_MIRROR:-$repo/../shared/vocab}"
sums="$here/VOCAB_SHA256SUMS"

mkdir -p "$dest"
status=0
while read -r sum name; do
  [ -n "$name" ] || continue
  target="$dest/$name"
  if [ -f "$target" ] && echo "$sum  $target" | sha256sum --check --status; then
    continue
  fi
  if [ ! -f "$mirror/$name" ]; then
    echo "fetch-vocab.sh: $name: not in mirror $mirror (set KVSERVE_VOCAB_MIRROR)" >&2
    status=1; continue
  fi
  tmp="$(mktemp "$dest/.$name.XXXXXX")"
  cp "$mirror/$name" "$tmp"
  if echo "$sum  $tmp" | sha256sum --check --status; then
    mv "$tmp" "$target"
    echo "fetch-vocab.sh: $name ok"
  else
    echo "fetch-vocab.sh: $name: sha256 mismatch (expected $sum)" >&2
    rm -f "$tmp"; status=1
  fi
done < "$sums"
exit $status
