#!/usr/bin/env bash
# The session cache's eviction policy on several traffic shapes, in one run: writes the
# synthetic traces (kvserve-bench cache-trace, fixed seeds), replays each of them and the
# shared Mooncake trace (when present) under LRU, the default policy and Belady's offline
# optimum at several capacities (kvserve-bench cache-replay), and prints one markdown table
# per trace (docs/performance.md, "Session cache eviction policy").
#
# Usage: bench/cache_policy_traces.sh BUILD_DIR [OUT_DIR] [CAPACITIES]
#   OUT_DIR     where the traces and JSON results go (default: a new temp folder)
#   CAPACITIES  comma-separated blocks (default 500,1000,2000,4000,8000,16000)
# Environment: SHARED_TRACE (default: ../shared/traces/conversation_trace.jsonl beside the
# source tree), EXTRA_REPLAY_FLAGS (passed to every cache-replay, e.g. to try an option).
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [OUT_DIR] [CAPACITIES]}
out=${2:-$(mktemp -d)}
capacities=${3:-500,1000,2000,4000,8000,16000}
src=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED_TRACE:-$src/../shared/traces/conversation_trace.jsonl}
bench=$build/bench/kvserve-bench
mkdir -p "$out"

# name|cache-trace flags. Shapes, not fits: each differs from the others in one main axis.
shapes=(
  "chat|--conversations 8000 --conversations-per-s 4 --turns geometric --turns-mean 3 --think exponential --think-mean-s 300 --first-prompt-mean-tokens 4000"
  "long-sessions|--conversations 2500 --conversations-per-s 1 --turns pareto --turns-mean 8 --turns-alpha 1.5 --think lognormal --think-mean-s 300 --think-sigma 1.5"
  "agent|--conversations 1200 --conversations-per-s 1 --turns geometric --turns-mean 15 --think exponential --think-mean-s 20 --prompt-mean-tokens 800 --answer-mean-tokens 500"
  "slow-returns|--conversations 6000 --conversations-per-s 4 --turns geometric --turns-mean 3 --think pareto --think-mean-s 1200 --think-alpha 1.3"
  "rag|--conversations 10000 --conversations-per-s 5 --turns geometric --turns-mean 1.3 --first-prompt-mean-tokens 6000 --system-prompts 200 --system-prompt-tokens 4096 --system-prompt-zipf 0.8"
)

traces=()
if [[ -f $shared ]]; then traces+=("mooncake|$shared"); fi
for shape in "${shapes[@]}"; do
  name=${shape%%|*}
  # shellcheck disable=SC2086  # the flags are words
  "$bench" cache-trace --seed 1 --output "$out/$name.jsonl" ${shape#*|} 2>>"$out/traces.log"
  traces+=("$name|$out/$name.jsonl")
done

for trace in "${traces[@]}"; do
  name=${trace%%|*}
  # shellcheck disable=SC2086
  "$bench" cache-replay --json --trace "${trace#*|}" --capacity-blocks "$capacities" \
    --policy lru,conversation,optimum ${EXTRA_REPLAY_FLAGS:-} >"$out/$name.json"
  python3 - "$name" "$out/$name.json" <<'EOF'
import json, sys
name, path = sys.argv[1], sys.argv[2]
ratio = {}
for line in open(path):
    r = json.loads(line)
    ratio[(r["policy"], r["capacity_blocks"])] = r["hit_ratio"]
caps = sorted({c for _, c in ratio})
print(f"\n{name}\n")
print("| capacity (blocks) | `lru` | `conversation` (default) | ÷ LRU | optimum | optimum ÷ LRU |")
print("|---:|---:|---:|---:|---:|---:|")
for c in caps:
    lru, conv, opt = ratio[("lru", c)], ratio[("conversation", c)], ratio[("optimum", c)]
    div = lambda a, b: f"{a / b:.2f}×" if b > 0 else "–"
    print(f"| {c:,} | {lru:.4f} | {conv:.4f} | {div(conv, lru)} | {opt:.4f} | {div(opt, lru)} |")
EOF
done
echo
cat "$out/traces.log"
echo "traces and JSON results in $out"
