// Replay of a prefix-block request trace (Mooncake's JSONL format) through a BlockIndex:
// the prefix-hit ratio a capacity and an eviction policy would have had on that traffic.
#ifndef KVSERVE_CACHESVC_TRACE_REPLAY_H_
#define KVSERVE_CACHESVC_TRACE_REPLAY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cachesvc/block_index.h"

namespace kvserve::cachesvc {

// One line of the trace: {"timestamp": ms, "input_length": tokens, "output_length": tokens,
// "hash_ids": [block ids of the request's prefix, in chain order]}. Equal ids are the same
// block (and, in chain order, the same prefix).
struct TraceRequest {
  int64_t timestamp_ms = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// Parses one line. The input is untrusted: anything but one JSON object whose "timestamp"
// and "hash_ids" (required) and "input_length" / "output_length" (optional) are
// non-negative integers (an array of them for hash_ids) is INVALID_ARGUMENT with a message
// saying what and at which column. Other keys are accepted with any JSON value (nesting
// deeper than 64 levels is refused); a duplicated known key is an error.
absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line);

// One line of the trace for `req` (no newline), in the key order above; ParseTraceLine reads
// it back to `req`.
std::string FormatTraceLine(const TraceRequest& req);

// Reads a trace file: one request per line, blank lines skipped, at most `max_requests`
// (0 = all). NOT_FOUND if the file cannot be opened; INVALID_ARGUMENT naming
// "path:line" for the first malformed line.
absl::StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path,
                                                    int64_t max_requests = 0);

struct ReplayOptions {
  // Cache capacity in blocks (every block counts 1 byte). Required (> 0).
  uint64_t capacity_blocks = 0;
  Policy policy = Policy::kConversation;
  // BlockIndexOptions::reuse_credit_ticks; negative = the BlockIndex default.
  int64_t reuse_credit_ticks = -1;
  // BlockIndexOptions::history_blocks; negative = the BlockIndex default.
  int64_t history_blocks = -1;
  // BlockIndexOptions::conversation_credit_ticks; negative = the BlockIndex default.
  int64_t conversation_credit_ticks = -1;
};

struct ReplayResult {
  int64_t requests = 0;
  int64_t blocks = 0;      // sum of all requests' blocks
  int64_t hit_blocks = 0;  // sum of each request's longest present prefix, at its arrival
  int64_t inserted_blocks = 0;
  int64_t evicted_blocks = 0;
  int64_t no_room_requests = 0;  // requests whose chain alone did not fit (rest not stored)
  double hit_ratio() const {
    return blocks == 0 ? 0.0 : static_cast<double>(hit_blocks) / static_cast<double>(blocks);
  }
  absl::Duration elapsed;  // wall time of the replay loop
};

// For each request in order: look up the longest present prefix of its hash_ids (counted
// as hits; no touch), then insert every block of it in chain order (a present block is
// touched), each as 1 byte with its predecessor as parent, at the request's timestamp, in
// one partition; then report the request (BlockIndex::EndRequest). Errors: INVALID_ARGUMENT for
// capacity_blocks == 0.
absl::StatusOr<ReplayResult> Replay(std::span<const TraceRequest> trace,
                                    const ReplayOptions& options);

// The same replay under Belady's offline optimum at the block level (the reference a policy
// is measured against; it reads the future, so it is not a BlockIndex policy): when a block
// needs room, the stored block whose next use is farthest goes (never used again first;
// among equal next uses, the deepest block of its chain, so a chain loses its tail first),
// and a new block whose own next use is farther than every stored block's is not stored.
// Same counts and errors as Replay (options other than capacity_blocks are ignored).
// O(B log B) for B blocks in the trace.
absl::StatusOr<ReplayResult> ReplayOptimum(std::span<const TraceRequest> trace,
                                           const ReplayOptions& options);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_TRACE_REPLAY_H_
