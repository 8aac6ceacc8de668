#!/usr/bin/env bash
# Installs every Debian 12 package that kvserve's build, tests and benchmarks need.
# (prometheus, haproxy and python3-yaml: the deploy/ tests run Prometheus, promtool and HAProxy.)
# Idempotent: does nothing (no apt-get update) when everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libopenblas-dev prometheus-cpp-dev libabsl-dev libmicrohttpd-dev libxxhash-dev libhiredis-dev libicu-dev
  nlohmann-json3-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang clang-format libclang-rt-14-dev libfuzzer-14-dev
  python3 python3-grpcio python3-protobuf python3-h2
  prometheus redis-server openssl libssl-dev haproxy python3-yaml
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js and npm (tests/openai_client_test.py runs the official openai npm package): Debian's,
# only when `node` or `npm` is missing, so that a machine's own Node.js (e.g. NodeSource's, whose
# nodejs carries npm and conflicts with Debian's npm package) stays as it is.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
