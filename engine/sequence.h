// The engine's per-request state while a request is queued or running.
#ifndef KVSERVE_ENGINE_SEQUENCE_H_
#define KVSERVE_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cache/block_hash.h"
#include "engine/engine.h"
#include "engine/output_processor.h"
#include "engine/sampler.h"

namespace kvserve::engine {

// Invariants (between steps):
//   * 0 <= num_computed < tokens.size(): the KV of positions [0, num_computed) is in the
//     sequence's blocks; the last token always still has to be fed to produce logits.
//   * has_table == (the KV cache manager holds a block table for `id`).
//   * prompt_len <= tokens.size(); tokens past prompt_len were sampled by this request.
//   * draft_tokens == 0. Only inside a step (engine.cc: proposed before scheduling,
//     verified after the Forward) may the last draft_tokens tokens be unverified
//     speculative proposals; whatever drops them (preemption, a step that cannot take
//     them) calls DropDrafts().
// Threading: owned and touched by the engine's step thread only.
struct Sequence {
  Sequence(RequestId id, Sampler sampler, OutputProcessor output)
      : id(id), sampler(std::move(sampler)), output(std::move(output)) {}

  RequestId id;
  std::shared_ptr<RequestSink> sink;
  std::vector<int32_t> tokens;   // context (history + prompt) then generated tokens
  int32_t prompt_len = 0;        // tokens of the context the request started from
  int32_t max_total_tokens = 0;  // finish with kLength when tokens.size() reaches it
  int32_t max_new_tokens = 0;    // sampling.max_tokens
  cache::BlockHash root;         // prefix-cache chain root (model + salt)
  std::string session_id;        // empty: stateless
  // A turn: the session record version it started from and its lease on the session
  // (engine/session_manager.h; 0 and empty without a session cache service).
  int64_t session_version = 0;
  std::string lease_holder;

  // Scheduling state.
  int32_t num_computed = 0;
  bool has_table = false;
  bool admitted_once = false;  // left the submission queue (queue limits no longer count it)
  int64_t arrival = 0;         // submission order; larger = younger

  // The session cache service (engine/remote_tier.h): asked once per request; positions
  // [remote_from, remote_to) were imported from it (none when equal).
  bool remote_asked = false;
  int32_t remote_from = 0;
  int32_t remote_to = 0;

  // Usage.
  int32_t cached_tokens = 0;         // local prefix cache
  int32_t cached_tokens_remote = 0;  // imported from the session cache service
  int32_t computed_prompt_tokens = 0;
  absl::Time submit_time;
  std::optional<absl::Time> first_scheduled;
  std::optional<absl::Time> first_token;
  absl::Time deadline = absl::InfiniteFuture();

  // Speculative decoding (engine/draft_source.h).
  int32_t draft_tokens = 0;     // unverified drafts at the end of `tokens` (see above)
  int32_t draft_len = 0;        // drafts to ask for next, adapted to the acceptance; 0 = unset
  int32_t drafts_proposed = 0;  // usage: draft tokens verified
  int32_t drafts_accepted = 0;  // of those, accepted
  void DropDrafts() {
    tokens.resize(tokens.size() - static_cast<size_t>(draft_tokens));
    draft_tokens = 0;
  }

  // Output.
  Sampler sampler;
  OutputProcessor output;

  int32_t remaining_tokens() const { return static_cast<int32_t>(tokens.size()) - num_computed; }
  int32_t completion_tokens() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SEQUENCE_H_
