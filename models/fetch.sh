#!/usr/bin/env bash
# Provides the model files kvserve tests and runs with, checked against their sha256:
#   stories260K.gguf, stories260K.bin, tok512.bin  (Karpathy's tinyllamas, MIT)
# Source order: the local mirror folder $KVSERVE_MODEL_MIRROR (default ../shared/models
# relative to the repository), then the public download URLs below.
# Usage: models/fetch.sh [DEST_DIR]   (default: the models/ folder of the repository)
# models/fetch-vocab.sh reuses it for another list (KVSERVE_FETCH_SUMS, KVSERVE_FETCH_MIRROR);
# a file without a download URL comes from the mirror only.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dest="${1:-$here}"
mirror="${KVSERVE_FETCH_MIRROR:-${KVSERVE_MODEL_MIRROR:-$repo/../shared/models}}"
sums="${KVSERVE_FETCH_SUMS:-$here/SHA256SUMS}"

declare -A URLS=(
  [stories260K.gguf]="https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
  [stories260K.bin]="https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin"
  [tok512.bin]="https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/tok512.bin"
)

mkdir -p "$dest"
status=0
while read -r sum name; do
  [ -n "$name" ] || continue
  target="$dest/$name"
  if [ -f "$target" ] && echo "$sum  $target" | sha256sum --check --status; then
    chmod 0644 "$target" 2>/dev/null || true   # repairs files an older fetch.sh left at 0600
    continue
  fi
  tmp="$(mktemp "$dest/.$name.XXXXXX")"
  # A mirror file this user cannot read (e.g. left at 0600 by an older fetch.sh and mounted
  # into a container) falls through to the download.
  if [ -r "$mirror/$name" ] && cp "$mirror/$name" "$tmp"; then
    :
  elif [ -n "${URLS[$name]:-}" ] && command -v curl >/dev/null &&
       curl -fsSL --retry 2 -o "$tmp" "${URLS[$name]}"; then
    :
  else
    echo "fetch.sh: $name: not in mirror $mirror and download failed" >&2
    rm -f "$tmp"; status=1; continue
  fi
  if echo "$sum  $tmp" | sha256sum --check --status; then
    # mktemp creates 0600; model files are read by other users (the container's non-root
    # kvserve user), so they get 0644 like any other data file.
    chmod 0644 "$tmp"
    mv "$tmp" "$target"
    echo "fetch.sh: $name ok"
  else
    echo "fetch.sh: $name: sha256 mismatch (expected $sum)" >&2
    rm -f "$tmp"; status=1
  fi
done < "$sums"
exit $status
