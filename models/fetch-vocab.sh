#!/usr/bin/env bash
# Provides the vocabulary-only GGUF files and llama.cpp's tokenizer test texts and ids
# (model/vocab_conformance_test.cc, bench/tokenizer_compare.sh) in models/vocab/, checked
# against models/VOCAB_SHA256SUMS, from the mirror folder $KVSERVE_VOCAB_MIRROR (default
# ../shared/vocab relative to the repository; its README.md says where each file comes
# from). There is no public download for the Llama 3 and Qwen files, which were written
# for kvserve from npm tokenizer packages, so a missing mirror is an error.
# Usage: models/fetch-vocab.sh [DEST_DIR]   (default: models/vocab)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
KVSERVE_FETCH_SUMS="$here/VOCAB_SHA256SUMS" \
  KVSERVE_FETCH_MIRROR="${KVSERVE_VOCAB_MIRROR:-$repo/../shared/vocab}" \
  exec "$here/fetch.sh" "${1:-$here/vocab}"
