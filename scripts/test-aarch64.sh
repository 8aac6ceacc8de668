#!/usr/bin/env bash
# Cross-compiles the cpu_blas kernel tests for AArch64 and runs them under qemu-user, once
# per emulated CPU, so that each NEON kernel level is tested against the scalar kernels
# and the run-time dispatch is seen to pick it:
#   cortex-a57   Armv8.0, NEON only           -> best level neon
#   neoverse-n1  Armv8.2 + dotprod            -> neon_dotprod
#   max          every feature qemu emulates  -> neon_i8mm
# (Real ARM hardware is not here: qemu checks results, not speed; docs/performance.md.)
#
# Installs what it needs when missing (no apt-get update otherwise): Debian's
# g++-aarch64-linux-gnu and qemu-user, and the arm64 multiarch packages of the libraries
# the backends link (dpkg --add-architecture arm64). Builds only cpu_blas_kernels_test in
# BUILD_DIR (default build-aarch64) with cmake/aarch64-toolchain.cmake and
# -DKVSERVE_BACKENDS_ONLY=ON.
#
# Usage: scripts/test-aarch64.sh [BUILD_DIR]     (make test-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-aarch64}"
JOBS="${JOBS:-2}"

HOST_PACKAGES=(g++-aarch64-linux-gnu qemu-user)
ARM64_PACKAGES=(libabsl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libopenblas-dev:arm64
                libxxhash-dev:arm64 libicu-dev:arm64)

missing=()
for p in "${HOST_PACKAGES[@]}" "${ARM64_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "test-aarch64: installing ${missing[*]}"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  # --no-remove: a multiarch package whose host twin is at another version must fail the
  # install, not replace the host's package.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    --no-remove "${missing[@]}"
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-toolchain.cmake \
  -DKVSERVE_BACKENDS_ONLY=ON -DCMAKE_BUILD_TYPE=Release -DKVSERVE_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target cpu_blas_kernels_test
TEST="$BUILD/backends/cpu_blas_kernels_test"

# run CPU LEVEL: the level's kernel tests and the dispatch check on qemu CPU model CPU,
# which must pick LEVEL as the best level and run (not skip) its tests. OpenBLAS gets one
# thread: its idle threads spin, which under qemu's emulation takes minutes.
failed=0
run() {
  local cpu="$1" level="$2" out
  echo "test-aarch64: -cpu $cpu, level $level"
  if ! out="$(OPENBLAS_NUM_THREADS=1 qemu-aarch64 -cpu "$cpu" -L /usr/aarch64-linux-gnu "$TEST" \
      --gtest_brief=1 --gtest_filter="IsaTest.*:*SimdKernelsTest.*/$level" 2>&1)"; then
    echo "$out"
    echo "test-aarch64: FAILED on -cpu $cpu"
    failed=1
    return
  fi
  if ! grep -q "best kernel level: $level\$" <<<"$out"; then
    echo "$out"
    echo "test-aarch64: FAILED: -cpu $cpu did not dispatch to $level"
    failed=1
  elif grep -q "SKIPPED" <<<"$out"; then
    echo "$out"
    echo "test-aarch64: FAILED: $level tests skipped on -cpu $cpu"
    failed=1
  else
    grep -E "^\[==========\]" <<<"$out" | tail -n 1
  fi
}
run cortex-a57 neon
run neoverse-n1 neon_dotprod
run max neon_i8mm
# The scalar level (the oracle itself), once. (gemm_test and the backend tests take more
# than ten minutes under qemu: not run here.)
echo "test-aarch64: -cpu max, scalar level"
OPENBLAS_NUM_THREADS=1 qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu "$TEST" --gtest_brief=1 \
  --gtest_filter="*SimdKernelsTest.*/scalar:QuantizeActivations*" | tail -n 1 || failed=1

if [ "$failed" -ne 0 ]; then exit 1; fi
echo "test-aarch64: every NEON level passed"
