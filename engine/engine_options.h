// Engine::Options and the engine factory.
#ifndef KVSERVE_ENGINE_ENGINE_OPTIONS_H_
#define KVSERVE_ENGINE_ENGINE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "cache/remote_kv_cache.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/remote_tier.h"
#include "engine/speculation.h"
#include "model/dtype.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace kvserve::engine {

// Every limit below is checked by Submit/OpenSession and gives a status a client can
// act on (see Engine). Defaults suit one 2-core CPU replica serving small models.
struct Engine::Options {
  // KV block size in token positions. Default 16.
  int32_t block_tokens = 16;
  // Element type of cached K/V: kF32 or kF16. Default kF16 (llama.cpp's default: half the
  // bytes of kF32 per cached position in the pool, in kvserve-cache and on the wire).
  model::DType kv_dtype = model::DType::kF16;
  // Bytes of KV memory (the block pool). Default 512 MiB.
  size_t kv_budget_bytes = size_t{512} << 20;
  // Make the whole pool resident when the engine starts, so the process's resident size
  // is known from the start (kvserve's --kv_prefault, on by default there). Default
  // false (tests and tools that start many small engines).
  bool kv_prefault = false;
  // Sequences decoding or prefilling at once. Default 64.
  int32_t max_running_sequences = 64;
  // Tokens per step over all sequences (decode rows + prefill chunks): the chunked
  // prefill budget. Default 512.
  int32_t max_step_tokens = 512;
  // Requests queued and not yet admitted; beyond -> Submit RESOURCE_EXHAUSTED.
  // Default 1024.
  int32_t max_waiting_requests = 1024;
  // Prompt tokens (whole contexts) of the queued requests; beyond -> RESOURCE_EXHAUSTED.
  // Default 1M.
  int64_t max_waiting_prompt_tokens = int64_t{1} << 20;
  // Open sessions; beyond -> OpenSession/ForkSession RESOURCE_EXHAUSTED. Default 4096.
  int32_t max_sessions = 4096;
  // Open sessions of one tenant (a non-empty tenant: the front end authenticates
  // callers); beyond -> OpenSession/ForkSession RESOURCE_EXHAUSTED naming
  // max_sessions_per_tenant. 0 = no per-tenant limit. Default 1024.
  int32_t max_sessions_per_tenant = 1024;
  // Tokens a session's history may hold; 0 = the model's context length. A turn that
  // would start beyond it -> RESOURCE_EXHAUSTED; generation stops (kLength) at it.
  int32_t max_session_tokens = 0;
  // Time-to-live of a session opened with ttl <= 0. Default 10 minutes.
  absl::Duration default_session_ttl = absl::Minutes(10);
  // Largest ttl accepted; more -> INVALID_ARGUMENT. Default 24 hours.
  absl::Duration max_session_ttl = absl::Hours(24);
  // Largest sampling.max_tokens accepted; more -> INVALID_ARGUMENT. Default 4096.
  int32_t max_tokens_limit = 4096;
  // Longest cache_salt accepted, in bytes; more -> INVALID_ARGUMENT. Default 256.
  int32_t max_cache_salt_bytes = 256;
  // Stop strings (16 of at most 256 bytes) and stop token ids (64) a request may carry;
  // more -> INVALID_ARGUMENT naming the field and the limit. See StopLimits.
  StopLimits stop_limits;
  // Seeds the fallback sampling seed of requests without one (mixed with the request
  // id). Session ids never depend on it (see SessionStore). Default 0.
  uint64_t seed = 0;
  // A session cache service (kvserve-cache) to fetch KV from and write KV and session
  // records to, or null for none. Must outlive the engine. See engine/remote_tier.h.
  cache::RemoteKvCache* remote_cache = nullptr;
  RemoteTier::Options remote;
  // With a session cache service: how long a turn's lease on its session lasts unless
  // renewed (engine/session_manager.h); a replica that dies mid-turn locks the session
  // for at most this long. Default 30 s.
  absl::Duration session_lease = absl::Seconds(30);
  // Speculative decoding (engine/speculation.h). Default: off.
  SpeculativeOptions speculative;
  // The clock for deadlines, session expiry and usage times; null = the wall clock.
  // Tests inject a common::testing::FakeClock. Must outlive the engine.
  const common::Clock* clock = nullptr;

  // The KV layout a backend for this engine must use.
  model::KvLayout KvLayoutFor(const model::ModelConfig& config) const {
    return model::KvLayout::ForModel(config, block_tokens, kv_dtype);
  }
};

// Checks every option that does not depend on the model (CreateEngine calls it; a binary
// calls it before loading a model). INVALID_ARGUMENT whose message starts with the field's
// name ("max_running_sequences must be >= 1, got 0"; "remote.timeout ..." for a field of
// `remote`).
absl::Status ValidateEngineOptions(const Engine::Options& options);

// Starts an engine (and its step thread) over `model` (which must outlive it) and
// `backend`, created for the same model with options.KvLayoutFor(model.config()).
// `draft_source`, when not null, is the speculative source, owned by the engine (the
// draft model that engine/model_loading.h loads for speculative.source "draft_model";
// speculative.custom_source must then be null). INVALID_ARGUMENT for an option out of
// range, a backend whose KV layout differs or source "draft_model" without a source;
// RESOURCE_EXHAUSTED when the KV budget cannot be allocated.
absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(
    const Engine::Options& options, const model::Model& model,
    std::unique_ptr<backends::Backend> backend,
    std::unique_ptr<DraftSource> draft_source = nullptr);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_ENGINE_OPTIONS_H_
