#!/usr/bin/env bash
# The README's main job (`make run`): starts the kvserve gRPC server with a model on
# 127.0.0.1:50051 (the OpenAI-compatible HTTP API on 127.0.0.1:8080, metrics on
# 127.0.0.1:9464), prints how to reach it, and stays in the foreground until Ctrl-C /
# SIGTERM (which drain it and exit 0).
#
# Usage: scripts/run-main.sh BUILD_DIR MODEL_PATH [extra kvserve flags...]
# Environment: KVSERVE_LISTEN (default 127.0.0.1:50051), KVSERVE_HTTP_LISTEN (default
# 127.0.0.1:8080), KVSERVE_METRICS_LISTEN (default 127.0.0.1:9464).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR MODEL_PATH [kvserve flags...]" >&2
  exit 2
fi
BUILD_DIR=$1
MODEL=$2
shift 2
LISTEN=${KVSERVE_LISTEN:-127.0.0.1:50051}
METRICS=${KVSERVE_METRICS_LISTEN:-127.0.0.1:9464}
HTTP=${KVSERVE_HTTP_LISTEN:-127.0.0.1:8080}
NAME=$(basename "$MODEL"); NAME=${NAME%.*}
KVSERVE="$BUILD_DIR/service/kvserve"
CLI="$BUILD_DIR/client/kvserve-cli"

for f in "$KVSERVE" "$CLI"; do
  if [ ! -x "$f" ]; then
    echo "run-main: $f is missing; build first (make build)" >&2
    exit 1
  fi
done
if [ ! -f "$MODEL" ]; then
  echo "run-main: model $MODEL is missing; fetch it first (make models)" >&2
  exit 1
fi

cat <<INFO
kvserve: serving $MODEL on $LISTEN (gRPC, plaintext), the OpenAI API on http://$HTTP/v1,
metrics on http://$METRICS/metrics

Reach it:
  $CLI --target $LISTEN info
  $CLI --target $LISTEN generate --prompt "Once upon a time" --max_tokens 64 --stream
  $CLI --target $LISTEN chat        # a session: each line you type is a turn
  $CLI --target $LISTEN bench --concurrency 4 --requests 16 --max_tokens 128 --ignore_eos
  curl -s http://$METRICS/metrics | grep '^kvserve_'
  # the OpenAI-compatible HTTP API (any OpenAI SDK: base URL http://$HTTP/v1, model "$NAME"):
  curl -s http://$HTTP/v1/models
  curl -s http://$HTTP/v1/completions -H 'Content-Type: application/json' \
      -d '{"model": "$NAME", "prompt": "Once upon a time", "max_tokens": 32}'
  #   chat (/v1/chat/completions) needs a chat template: models without one in their file
  #   (stories260K) take e.g. --chat-template chatml (make run ARGS='--chat-template chatml')
  # any gRPC client, e.g. grpcurl (server reflection is on):
  #   grpcurl -plaintext $LISTEN list
  #   grpcurl -plaintext -d '{"text":"Once upon a time","max_tokens":32}' $LISTEN kvserve.v1.Inference/GenerateStream
  #   grpcurl -plaintext -d '{"service":"kvserve.v1.Inference"}' $LISTEN grpc.health.v1.Health/Check
  # Python: python3-grpcio with stubs from protoc --python_out=. -Iproto proto/kvserve/v1/inference.proto
Stop with Ctrl-C (drains in-flight requests, then exits).

INFO
exec "$KVSERVE" --model "$MODEL" --listen "$LISTEN" --metrics-listen "$METRICS" \
  --http-listen "$HTTP" "$@"
