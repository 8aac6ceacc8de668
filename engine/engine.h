// The engine: continuous batching over one model, one backend and one KV block pool.
// The implementation is created by CreateEngine (engine/engine_options.h); service/ and
// the benchmarks program against this interface only.
#ifndef KVSERVE_ENGINE_ENGINE_H_
#define KVSERVE_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "engine/finish_reason.h"
#include "engine/sampling_params.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace kvserve::engine {

using RequestId = uint64_t;

struct Usage {
  int32_t prompt_tokens = 0;         // tokens of the whole context the turn started from
  int32_t cached_tokens = 0;         // of those, served from the local prefix cache
  int32_t cached_tokens_remote = 0;  // of those, fetched from the session cache service
  int32_t computed_tokens = 0;       // prompt tokens actually prefilled
  int32_t completion_tokens = 0;
  int32_t draft_tokens = 0;            // speculative draft tokens verified
  int32_t draft_tokens_accepted = 0;   // of those, accepted (part of completion_tokens)
  absl::Duration queue_time;           // submit -> first scheduled
  absl::Duration time_to_first_token;  // submit -> first token sampled
  absl::Duration total_time;           // submit -> finish
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// TokenEvent::token of an event that carries only text: the held-back tail of the
// stream (an incomplete character, a possible stop-string prefix) flushed when the
// request stops on EOS or a stop token id, which are themselves never emitted.
inline constexpr int32_t kTextOnlyToken = -1;

struct TokenEvent {
  int32_t token = 0;  // the sampled token id, or kTextOnlyToken
  std::string text;   // UTF-8 safe text delta (may be empty while a character is split)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // sampling.top_logprobs entries
};

// Receives a request's output. Called on the engine's step thread: implementations
// must not block (queue and return). OnFinish is called exactly once, last; by then
// Engine::Stats() already counts the request's blocks as released. A sink may call
// Engine::Submit/Cancel/session methods from these callbacks.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnToken(const TokenEvent& event) = 0;
  virtual void OnFinish(const absl::Status& status, FinishReason reason, const Usage& usage) = 0;
};

struct Request {
  // The prompt as token ids. For a session turn: only the new turn's tokens; the
  // engine prepends the session's stored history (prompt + generated tokens). Empty
  // only for a turn of a session with history (generation continues the history).
  std::vector<int32_t> prompt_tokens;
  // Prepend the vocabulary's BOS when the context starts with this prompt: a stateless
  // request, or a turn of a session whose history is empty (decided atomically with
  // the turn, so callers never read the session first). Set for text prompts.
  bool add_bos = false;
  // For a session turn: tokens put before prompt_tokens when the session already has
  // history (a chat template's end of the previous assistant reply, e.g. "<|im_end|>\n"),
  // less everything up to and including turn_end_token when the history already ends
  // with that token (the model stopped on it) and the separator contains it. Decided
  // under the session's lock, like add_bos. Ignored for stateless requests.
  std::vector<int32_t> turn_separator;
  int32_t turn_end_token = -1;  // -1: none
  std::string session_id;       // empty: stateless request
  SamplingParams sampling;
  absl::Time deadline = absl::InfiniteFuture();
  // Requests with different salts never share KV blocks. With a tenant, the salt the
  // KV is keyed by is TenantCacheSalt(tenant, cache_salt): one tenant cannot pick a
  // salt that shares another's KV.
  std::string cache_salt;
  // Who sends the request: the authenticated tenant, or empty when the front end
  // authenticates nobody. A session turn only finds sessions of the same tenant.
  std::string tenant;
};

// The salt KV blocks of a request of `tenant` with `cache_salt` are keyed by:
// `cache_salt` itself without a tenant, else tenant + '\0' + cache_salt. Tenant names
// hold no NUL (they are single words of a token file), so two tenants never get the
// same salt whatever salts they send; the same tenant with the same salt always does.
std::string TenantCacheSalt(const std::string& tenant, const std::string& cache_salt);

struct SessionInfo {
  std::string id;
  int32_t history_tokens = 0;
  absl::Time expires_at;
  bool busy = false;  // a turn is running
};

// The engine's use of a session cache service (engine/remote_tier.h); all zero when
// none is configured.
struct RemoteCacheStats {
  bool enabled = false;
  bool failing = false;               // the last remote call failed
  int64_t lookups_total = 0;          // chains looked up
  int64_t lookup_blocks_total = 0;    // blocks the service held beyond the local prefix
  int64_t fetches_skipped_total = 0;  // recomputing was estimated faster
  int64_t fetched_blocks_total = 0;   // checked blocks handed to the pool
  int64_t fetched_bytes_total = 0;
  double fetch_seconds_total = 0.0;   // time in fetch calls
  int64_t rejected_blocks_total = 0;  // records that failed a check (by reason below)
  std::vector<std::pair<std::string, int64_t>> rejected_by_reason;
  int64_t stored_blocks_total = 0;  // blocks written behind
  int64_t stored_bytes_total = 0;
  int64_t store_dropped_total = 0;      // store jobs dropped (queue full or failure)
  int64_t errors_total = 0;             // failed remote calls
  int64_t sessions_restored_total = 0;  // sessions unknown here, continued from the service
  // Local sessions replaced by the service's record of another version (the session
  // continued on another replica).
  int64_t sessions_refreshed_total = 0;
  int64_t session_commits_total = 0;  // turns whose record was committed (engine/session_manager.h)
  // Turns refused because another turn held the session, or whose commit found the
  // session changed or closed on another replica.
  int64_t session_conflicts_total = 0;
};

// Speculative decoding's counters (engine/speculation.h); zero when it is off.
struct SpeculativeStats {
  std::string source;                 // "ngram", or empty when off
  int64_t verifications_total = 0;    // sequence-steps that verified at least one draft
  int64_t draft_tokens_total = 0;     // draft tokens verified
  int64_t accepted_tokens_total = 0;  // of those, accepted
  // accepted_length_counts[a]: verifications that accepted a drafts (a in [0, draft_max]).
  std::vector<int64_t> accepted_length_counts;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;    // referenced by a live sequence or session
  int64_t blocks_cached = 0;  // refcount 0, still findable by prefix hash
  int64_t blocks_free = 0;
  int64_t prefix_queries_total = 0;    // blocks looked up
  int64_t prefix_hits_total = 0;       // blocks found
  int64_t evictions_total = 0;         // cached blocks reused for new data
  int64_t session_blocks = 0;          // block references sessions hold between turns (a session
                                       // keeps its last chain while its next turn runs)
  int64_t session_reclaims_total = 0;  // sessions whose blocks were taken back under pressure
  int64_t preemptions_total = 0;
  int64_t steps_total = 0;
  int32_t open_sessions = 0;
  // Requests whose sink's OnFinish has returned (any outcome). A snapshot that counts a
  // request was published after its sink heard of the finish (the snapshot published
  // inside Finish, which shows the request gone, does not count it yet).
  int64_t requests_finished_total = 0;
  double last_step_seconds = 0.0;
  RemoteCacheStats remote;
  SpeculativeStats speculative;
};

// The request limits Submit enforces (from Engine::Options), for front ends that
// describe them (GetModelInfo) without keeping copies of their own.
struct SubmitLimits {
  int32_t max_tokens_limit = 4096;     // largest sampling.max_tokens
  int32_t max_cache_salt_bytes = 256;  // longest cache_salt
  StopLimits stop_limits;              // stop strings and stop token ids
};

class Engine {
 public:
  struct Options;  // defined in engine/engine_options.h
  virtual ~Engine() = default;

  // Queues a request; tokens stream to `sink`. Thread-safe.
  // Submit is where a request is validated (once): every invalid field is a FieldError
  // (engine/field_error.h) naming its engine::Request path, e.g. "sampling.top_p",
  // "prompt_tokens[3]", or "prompt_tokens" when the context is empty or too long.
  // Other errors (the sink is not called): NOT_FOUND (unknown/expired session),
  // ABORTED (session busy: a turn of it is running), RESOURCE_EXHAUSTED (queue full,
  // session history limit), UNAVAILABLE (shutting down).
  // With a session cache service, a session turn is checked against the session's
  // record there on the engine's session worker (engine/session_manager.h), so the
  // session errors above (and UNAVAILABLE when the service does not answer, ABORTED
  // when the turn runs on another replica) reach the sink instead, as OnFinish(status,
  // kError) before any token; and a completed turn's OnFinish comes after its record
  // was committed, or with the commit's error (kError: the turn was not recorded).
  virtual absl::StatusOr<RequestId> Submit(Request request, std::shared_ptr<RequestSink> sink) = 0;
  // Cancels a queued or running request; its sink gets OnFinish(kCancelled) and its KV
  // is released. Unknown ids are ignored. Thread-safe.
  virtual void Cancel(RequestId id) = 0;

  // Sessions belong to the tenant that opens them (`tenant`: as Request::tenant; empty
  // when nobody is authenticated). A session of another tenant is NOT_FOUND with the
  // message of an unknown id, for every method and for Submit's turns.
  // Open/Fork: RESOURCE_EXHAUSTED for max_sessions or max_sessions_per_tenant.
  // With a session cache service these calls read or write the session's record there
  // (engine/session_manager.h): `done` then runs on the engine's session worker, else
  // before the call returns; exactly once either way, and it must not block. A session
  // closed on any replica is NOT_FOUND; UNAVAILABLE when the service does not answer a
  // Close (the session is then not closed everywhere yet: retry) or a Fork.
  using SessionCallback = std::function<void(absl::StatusOr<SessionInfo>)>;
  using StatusCallback = std::function<void(absl::Status)>;
  virtual void OpenSessionAsync(absl::Duration ttl, const std::string& tenant,
                                SessionCallback done) = 0;
  virtual void ForkSessionAsync(const std::string& parent_id, absl::Duration ttl,
                                const std::string& tenant, SessionCallback done) = 0;
  virtual void CloseSessionAsync(const std::string& id, const std::string& tenant,
                                 StatusCallback done) = 0;
  virtual void GetSessionAsync(const std::string& id, const std::string& tenant,
                               SessionCallback done) = 0;
  // The same, waiting for the answer (tools and tests; never from a sink or a gRPC
  // callback thread).
  absl::StatusOr<SessionInfo> OpenSession(absl::Duration ttl, const std::string& tenant);
  absl::StatusOr<SessionInfo> ForkSession(const std::string& parent_id, absl::Duration ttl,
                                          const std::string& tenant);
  absl::Status CloseSession(const std::string& id, const std::string& tenant);
  absl::StatusOr<SessionInfo> GetSession(const std::string& id, const std::string& tenant);

  virtual EngineStats Stats() const = 0;
  virtual SubmitLimits submit_limits() const = 0;
  // The layout of the engine's KV blocks (KvLayout::token_bytes() is what a cached token
  // costs). Immutable; any thread.
  virtual model::KvLayout kv_layout() const = 0;
  // Stops accepting work (Submit -> UNAVAILABLE), lets running and queued requests
  // finish until `deadline`, then finishes the rest with kCancelled (status UNAVAILABLE),
  // releases session KV blocks and stops the step thread; returns once it has stopped.
  // Idempotent; a later call may bring the deadline forward. Called from a sink callback
  // it only starts the shutdown (the engine's destructor waits for the thread).
  virtual void Shutdown(absl::Time deadline) = 0;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_ENGINE_H_
