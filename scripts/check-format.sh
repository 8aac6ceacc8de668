#!/usr/bin/env bash
# Fails when a tracked C++ file differs from .clang-format (Debian 12's clang-format 14).
# Fix with: git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done < <(git ls-files '*.cc' '*.h')
if [ ${#bad[@]} -ne 0 ]; then
  echo "check-format: ${#bad[@]} file(s) differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: git ls-files '*.cc' '*.h' | xargs clang-format -i" >&2
  exit 1
fi
echo "check-format: every C++ file matches .clang-format"
