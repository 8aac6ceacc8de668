// The engine loop: one step thread owns the scheduler, the KV cache manager and the
// backend; API calls from any thread talk to it through a mutex-protected inbox.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "cache/kv_cache_manager.h"
#include "engine/context_limits.h"
#include "engine/engine_options.h"
#include "engine/field_error.h"
#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/session_store.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine {
namespace {

uint64_t Mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool SameLayout(const model::KvLayout& a, const model::KvLayout& b) {
  return a.n_layers == b.n_layers && a.kv_dim == b.kv_dim && a.block_tokens == b.block_tokens &&
         a.dtype == b.dtype;
}

absl::Status ValidateOptions(const Engine::Options& o) {
  auto bad = [](const char* name, auto value) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is out of range: ", value));
  };
  if (o.block_tokens < 1 || o.block_tokens > 4096) return bad("block_tokens", o.block_tokens);
  if (o.kv_dtype != model::DType::kF32 && o.kv_dtype != model::DType::kF16) {
    return absl::InvalidArgumentError("kv_dtype must be f32 or f16");
  }
  if (o.max_running_sequences < 1) return bad("max_running_sequences", o.max_running_sequences);
  if (o.max_step_tokens < 1) return bad("max_step_tokens", o.max_step_tokens);
  if (o.max_waiting_requests < 1) return bad("max_waiting_requests", o.max_waiting_requests);
  if (o.max_waiting_prompt_tokens < 1) {
    return bad("max_waiting_prompt_tokens", o.max_waiting_prompt_tokens);
  }
  if (o.max_sessions < 0) return bad("max_sessions", o.max_sessions);
  if (o.max_sessions_per_tenant < 0) {
    return bad("max_sessions_per_tenant", o.max_sessions_per_tenant);
  }
  if (o.max_session_tokens < 0) return bad("max_session_tokens", o.max_session_tokens);
  if (o.default_session_ttl <= absl::ZeroDuration() || o.max_session_ttl < o.default_session_ttl) {
    return absl::InvalidArgumentError("default_session_ttl must be > 0 and <= max_session_ttl");
  }
  if (o.max_tokens_limit < 1) return bad("max_tokens_limit", o.max_tokens_limit);
  if (o.max_cache_salt_bytes < 0) return bad("max_cache_salt_bytes", o.max_cache_salt_bytes);
  if (o.stop_limits.max_stop_strings < 0) {
    return bad("max_stop_strings", o.stop_limits.max_stop_strings);
  }
  if (o.stop_limits.max_stop_string_bytes < 1) {
    return bad("max_stop_string_bytes", o.stop_limits.max_stop_string_bytes);
  }
  if (o.stop_limits.max_stop_token_ids < 0) {
    return bad("max_stop_token_ids", o.stop_limits.max_stop_token_ids);
  }
  return absl::OkStatus();
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(const Options& options, const model::Model& model,
             std::unique_ptr<backends::Backend> backend, std::unique_ptr<cache::KvCacheManager> kv,
             std::unique_ptr<model::Tokenizer> tokenizer)
      : options_(options),
        model_(model),
        clock_(options.clock != nullptr ? options.clock : common::Clock::Real()),
        max_session_tokens_(options.max_session_tokens > 0 ? options.max_session_tokens
                                                           : model.config().context_length),
        kv_capacity_tokens_(kv->SequenceCapacityTokens(options.max_step_tokens)),
        backend_(std::move(backend)),
        kv_(std::move(kv)),
        tokenizer_(std::move(tokenizer)),
        context_limits_{model.config().context_length, kv_capacity_tokens_},
        sessions_(SessionStore::Options{options.max_sessions, options.max_sessions_per_tenant,
                                        max_session_tokens_, options.default_session_ttl,
                                        options.max_session_ttl, context_limits_}),
        scheduler_(Scheduler::Options{options.max_running_sequences, options.max_step_tokens},
                   kv_.get()) {
    if (options.remote_cache != nullptr) {
      remote_tier_ = std::make_unique<RemoteTier>(
          options.remote_cache, options.remote, kv_->layout(), model.config().n_kv_heads,
          [this](RemoteTier::FetchResult r) {
            std::lock_guard<std::mutex> lock(mu_);
            fetched_.push_back(std::move(r));
            cv_.notify_one();
          },
          [this](uint64_t key) {
            std::lock_guard<std::mutex> lock(mu_);
            exported_.push_back(key);
            cv_.notify_one();
          });
    }
    PublishStats(0.0);
    thread_ = std::thread([this] { Run(); });
    step_thread_id_ = thread_.get_id();
  }

  ~EngineImpl() override { Shutdown(absl::InfinitePast()); }

  absl::StatusOr<RequestId> Submit(Request request, std::shared_ptr<RequestSink> sink) override;
  void Cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
    cv_.notify_one();
  }

  absl::StatusOr<SessionInfo> OpenSession(absl::Duration ttl, const std::string& tenant) override {
    if (ShuttingDown()) return absl::UnavailableError("engine is shutting down");
    auto info = sessions_.Open(ttl, tenant, clock_->Now());
    if (info.ok()) PublishSession(info->id);
    return info;
  }
  absl::StatusOr<SessionInfo> ForkSession(const std::string& parent_id, absl::Duration ttl,
                                          const std::string& tenant) override {
    if (ShuttingDown()) return absl::UnavailableError("engine is shutting down");
    SyncSession(parent_id, tenant);
    auto info = sessions_.Fork(parent_id, ttl, tenant, clock_->Now());
    if (info.ok()) PublishSession(info->id);
    Wake();
    return info;
  }
  absl::Status CloseSession(const std::string& id, const std::string& tenant) override {
    absl::Status status = sessions_.Close(id, tenant, clock_->Now());
    if (remote_tier_ != nullptr) {
      // Closed everywhere: a session known only to the service closes there (if it is
      // the caller's).
      if (absl::IsNotFound(status) && RemoteRecord(id, tenant).ok()) status = absl::OkStatus();
      if (status.ok()) remote_tier_->DeleteSession(id);
    }
    Wake();
    return status;
  }
  absl::StatusOr<SessionInfo> GetSession(const std::string& id,
                                         const std::string& tenant) override {
    SyncSession(id, tenant);
    auto info = sessions_.Get(id, tenant, clock_->Now());
    if (!info.ok()) Wake();  // it may just have expired: release its KV blocks
    return info;
  }

  SubmitLimits submit_limits() const override {
    return SubmitLimits{options_.max_tokens_limit, options_.max_cache_salt_bytes,
                        options_.stop_limits};
  }

  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

  void Shutdown(absl::Time deadline) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!shutting_down_) {
        shutting_down_ = true;
        shutdown_deadline_ = deadline;
      } else {
        shutdown_deadline_ = std::min(shutdown_deadline_, deadline);
      }
      cv_.notify_one();
    }
    // From a sink callback (the step thread itself) only ask: the loop ends after the
    // current step and the destructor joins.
    if (std::this_thread::get_id() == step_thread_id_) return;
    std::lock_guard<std::mutex> lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  bool ShuttingDown() {
    std::lock_guard<std::mutex> lock(mu_);
    return shutting_down_;
  }
  void Wake() {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
    cv_.notify_one();
  }

  // Step thread.
  void Run();
  // Runs one step; returns the prompt tokens it prefilled.
  int32_t Step();
  void HandleSample(Sequence& seq, std::span<float> logits, absl::Time now,
                    std::vector<std::pair<RequestId, FinishReason>>* finished);
  void Finish(RequestId id, const absl::Status& status, FinishReason reason);
  void ExpireDeadlines(absl::Time now);
  // Forks and removals from the session store, applied to kv_'s session tier.
  void ApplySessionEvents();
  void PublishStats(double step_seconds);
  void ReleaseQueueSlot(const Sequence& seq);

  // The session cache service (all no-ops without one). Any thread:
  //   RemoteRecord: the service's record of `id` if it is for this model and `tenant`'s
  //     (NOT_FOUND otherwise).
  //   SyncSession: before session `id` of `tenant` is used (turn, fork, get), one
  //     GetSession brings it up to date: a session unknown here is restored from the
  //     record; a local copy with fewer completed turns than the record (the session
  //     continued on another replica) is replaced by it (SessionStore::AdoptNewer).
  //     No record, another tenant's or a failing service: the local copy is used as is
  //     (failures are counted and logged by the tier); the caller's call never fails here.
  //   PublishSession: writes the record of new session `id` now (history and turn ends
  //     as of now; blocks up to the remote timeout), so that a session-affine router
  //     may send its first turn to another replica. A failed write is only counted.
  absl::StatusOr<cache::RemoteSession> RemoteRecord(const std::string& id, const std::string& tenant);
  void SyncSession(const std::string& id, const std::string& tenant);
  void PublishSession(const std::string& id);
  // The record of session `id` for the service; `root` is the chain root of its last
  // turn (its head block's chain).
  std::optional<cache::RemoteSession> SessionRecordOf(const std::string& id, const cache::BlockHash& root);
  // Step thread: routes an arrived sequence to the scheduler, or first to a remote
  // fetch; takes fetch results and finished exports back.
  void Admit(std::unique_ptr<Sequence> seq);
  void OnFetched(RemoteTier::FetchResult result);
  // Writes the committed blocks of finished `seq` (and its session's record) behind.
  void Export(const Sequence& seq, bool session_alive);

  const Options options_;
  const model::Model& model_;
  const common::Clock* const clock_;
  const int32_t max_session_tokens_;
  const int64_t kv_capacity_tokens_;
  std::unique_ptr<backends::Backend> backend_;         // step thread
  std::unique_ptr<cache::KvCacheManager> kv_;          // step thread
  const std::unique_ptr<model::Tokenizer> tokenizer_;  // immutable; may be null
  const ContextLimits context_limits_;
  SessionStore sessions_;  // thread-safe
  Scheduler scheduler_;    // step thread

  // Step-thread state. Session KV blocks live in kv_'s session tier.
  std::vector<float> logits_;  // [batch, vocab]
  // Sequences waiting for a remote fetch (not yet in the scheduler).
  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> fetching_;
  uint64_t next_export_key_ = 0;
  // Measured prefill cost (smoothed), for the fetch-or-recompute estimate; 0 = unknown.
  double prefill_seconds_per_token_ = 0.0;
  int64_t steps_total_ = 0;
  int64_t requests_finished_total_ = 0;
  absl::Time next_session_sweep_ = absl::InfinitePast();

  // The inbox.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<RemoteTier::FetchResult> fetched_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> exported_ ABSL_GUARDED_BY(mu_);  // export keys to release
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_);
  int32_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet admitted
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_ ABSL_GUARDED_BY(stats_mu_);

  std::atomic<RequestId> next_id_{1};
  std::atomic<int64_t> sessions_restored_{0};
  std::atomic<int64_t> sessions_refreshed_{0};
  std::mutex join_mu_;
  std::thread thread_;
  std::thread::id step_thread_id_;  // set once in the constructor
  // Last: destroyed first (its workers call back into the inbox and read kv_'s blocks).
  std::unique_ptr<RemoteTier> remote_tier_;
};

absl::StatusOr<RequestId> EngineImpl::Submit(Request request, std::shared_ptr<RequestSink> sink) {
  const model::ModelConfig& config = model_.config();
  if (sink == nullptr) return absl::InvalidArgumentError("sink must not be null");
  if (absl::Status s =
          ValidateRequest(request, RequestRules{config.vocab_size, options_.max_tokens_limit,
                                                options_.max_cache_salt_bytes, options_.stop_limits,
                                                tokenizer_ != nullptr});
      !s.ok()) {
    return s;
  }
  if (ShuttingDown()) return absl::UnavailableError("engine is shutting down");

  const absl::Time now = clock_->Now();
  const bool is_turn = !request.session_id.empty();
  const std::optional<int32_t> bos =
      request.add_bos ? std::optional<int32_t>(model_.vocab().bos_id) : std::nullopt;
  std::vector<int32_t> context;
  if (is_turn) {
    SyncSession(request.session_id, request.tenant);
    // BOS is decided under the session's lock: only an empty history gets it.
    auto begun = sessions_.BeginTurn(request.session_id, request.tenant, request.prompt_tokens, bos,
                                     now, request.turn_separator, request.turn_end_token);
    if (!begun.ok()) return begun.status();
    context = std::move(begun->context);
  } else {
    if (bos.has_value()) context.push_back(*bos);
    context.insert(context.end(), request.prompt_tokens.begin(), request.prompt_tokens.end());
  }
  auto undo_turn = [&] {
    if (is_turn) sessions_.EndTurn(request.session_id, nullptr, now);
  };
  // (BeginTurn checked a turn's context under the session's lock.)
  if (!is_turn) {
    if (absl::Status s = CheckContextFits(context_limits_, context.size(), 0); !s.ok()) return s;
  }
  const int64_t n = static_cast<int64_t>(context.size());

  // Build the sequence before taking the inbox lock (the sampler allocates [vocab]).
  const RequestId id = next_id_.fetch_add(1);
  auto sampler =
      Sampler::Create(request.sampling, config.vocab_size, Mix64(options_.seed ^ Mix64(id)));
  if (!sampler.ok()) {
    undo_turn();
    return sampler.status();
  }
  auto seq = std::make_unique<Sequence>(
      id, *std::move(sampler),
      OutputProcessor(request.sampling, model_.vocab().eos_id, tokenizer_.get(), context.back()));
  seq->sink = std::move(sink);
  seq->prompt_len = static_cast<int32_t>(n);
  seq->max_new_tokens = request.sampling.max_tokens;
  int64_t max_total = std::min<int64_t>(config.context_length, kv_capacity_tokens_);
  if (is_turn) max_total = std::min<int64_t>(max_total, max_session_tokens_);
  seq->max_total_tokens = static_cast<int32_t>(max_total);
  // immutable part of kv_: any thread
  seq->root = kv_->RootHash(TenantCacheSalt(request.tenant, request.cache_salt));
  seq->session_id = request.session_id;
  seq->arrival = static_cast<int64_t>(id);
  seq->submit_time = now;
  seq->deadline = request.deadline;
  seq->tokens = std::move(context);

  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) {
    lock.unlock();
    undo_turn();
    return absl::UnavailableError("engine is shutting down");
  }
  if (queued_requests_ >= options_.max_waiting_requests ||
      queued_tokens_ + n > options_.max_waiting_prompt_tokens) {
    const int32_t q = queued_requests_;
    const int64_t qt = queued_tokens_;
    lock.unlock();
    undo_turn();
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine overloaded: ", q, " requests with ", qt, " prompt tokens are waiting (limits ",
        options_.max_waiting_requests, " and ", options_.max_waiting_prompt_tokens, ")"));
  }
  ++queued_requests_;
  queued_tokens_ += n;
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return id;
}

void EngineImpl::ReleaseQueueSlot(const Sequence& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  --queued_requests_;
  queued_tokens_ -= seq.prompt_len;
}

void EngineImpl::Run() {
  while (true) {
    std::vector<std::unique_ptr<Sequence>> arrived;
    std::vector<RequestId> cancels;
    std::vector<RemoteTier::FetchResult> fetched;
    std::vector<uint64_t> exported;
    bool shutting_down = false;
    absl::Time shutdown_deadline;
    const bool busy = !scheduler_.running().empty() || !scheduler_.waiting().empty();
    const std::optional<absl::Time> next_expiry = busy ? std::nullopt : sessions_.NextExpiry();
    const absl::Time before_wait = clock_->Now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto has_input = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !inbox_.empty() || !cancels_.empty() || !fetched_.empty() || !exported_.empty() ||
               wake_ || shutting_down_;
      };
      if (!busy) {
        if (next_expiry.has_value()) {
          // Until the next expiry can be swept (the sweep runs at most once a second, so
          // an expired session does not spin the loop), re-checked at least every second
          // (a session opened meanwhile may expire earlier). On the engine's clock.
          const absl::Time due = std::max(*next_expiry, next_session_sweep_);
          const absl::Time deadline =
              std::clamp(due, before_wait + absl::Milliseconds(1), before_wait + absl::Seconds(1));
          while (!has_input() && clock_->Now() < deadline) {
            clock_->WaitUntil(cv_, lock, deadline);
          }
        } else {
          cv_.wait(lock, has_input);
        }
      }
      arrived.swap(inbox_);
      cancels.swap(cancels_);
      fetched.swap(fetched_);
      exported.swap(exported_);
      wake_ = false;
      shutting_down = shutting_down_;
      shutdown_deadline = shutdown_deadline_;
    }

    for (uint64_t key : exported) kv_->ReleaseExport(key);
    for (auto& result : fetched) OnFetched(std::move(result));
    for (auto& seq : arrived) Admit(std::move(seq));
    for (RequestId id : cancels) {
      Finish(id, absl::CancelledError("request cancelled"), FinishReason::kCancelled);
    }
    const absl::Time now = clock_->Now();
    if (now >= next_session_sweep_) {  // O(sessions): at most once a second of clock time
      sessions_.ExpireIdle(now);
      next_session_sweep_ = now + absl::Seconds(1);
    }
    ApplySessionEvents();
    ExpireDeadlines(now);

    const bool has_work = !scheduler_.running().empty() || !scheduler_.waiting().empty();
    if (shutting_down && ((!has_work && fetching_.empty()) || now >= shutdown_deadline)) {
      std::vector<RequestId> rest;
      for (const auto* q : {&scheduler_.running(), &scheduler_.waiting()}) {
        for (const auto& seq : *q) rest.push_back(seq->id);
      }
      for (const auto& [id, seq] : fetching_) rest.push_back(id);
      for (RequestId id : rest) {
        Finish(id, absl::UnavailableError("engine shut down"), FinishReason::kCancelled);
      }
      kv_->ReleaseAllSessions();
      PublishStats(0.0);
      return;
    }
    double step_seconds = 0.0;
    if (has_work) {
      const auto start = std::chrono::steady_clock::now();
      const int32_t prefill_tokens = Step();
      step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++steps_total_;
      // Mostly-prefill steps teach the fetch-or-recompute estimate (smoothed).
      if (prefill_tokens >= 64) {
        const double per_token = step_seconds / prefill_tokens;
        prefill_seconds_per_token_ = prefill_seconds_per_token_ == 0.0
                                         ? per_token
                                         : 0.7 * prefill_seconds_per_token_ + 0.3 * per_token;
      }
    }
    PublishStats(step_seconds);
  }
}

int32_t EngineImpl::Step() {
  StepPlan plan = scheduler_.Schedule();
  for (Sequence* seq : plan.out_of_blocks) {
    // The pool cannot hold this sequence's next token even alone: its context is full.
    Finish(seq->id, absl::OkStatus(), FinishReason::kLength);
  }
  if (plan.chunks.empty()) return 0;
  int32_t prefill_tokens = 0;
  for (const StepPlan::Chunk& c : plan.chunks) {
    if (c.num_tokens > 1) prefill_tokens += c.num_tokens;
  }

  const absl::Time now = clock_->Now();
  const int32_t vocab = model_.config().vocab_size;
  backends::Batch batch;
  batch.sequences.reserve(plan.chunks.size());
  for (const StepPlan::Chunk& c : plan.chunks) {
    Sequence& seq = *c.seq;
    if (!seq.first_scheduled.has_value()) seq.first_scheduled = now;
    if (!seq.admitted_once) {
      seq.admitted_once = true;
      // Of the prefix found, the positions imported from the session cache service.
      seq.cached_tokens_remote =
          std::max(0, std::min(seq.num_computed, seq.remote_to) - seq.remote_from);
      seq.cached_tokens = seq.num_computed - seq.cached_tokens_remote;
      ReleaseQueueSlot(seq);
    }
    backends::SequenceInput in;
    in.tokens =
        std::span<const int32_t>(seq.tokens)
            .subspan(static_cast<size_t>(seq.num_computed), static_cast<size_t>(c.num_tokens));
    in.cached_tokens = seq.num_computed;
    in.blocks = kv_->BlockPointers(seq.id);
    in.want_logits = seq.num_computed + c.num_tokens == static_cast<int32_t>(seq.tokens.size());
    batch.sequences.push_back(in);
  }
  logits_.resize(plan.chunks.size() * static_cast<size_t>(vocab));
  const absl::Status status = backend_->Forward(batch, logits_);
  if (!status.ok()) {
    for (const StepPlan::Chunk& c : plan.chunks) {
      Finish(c.seq->id, status, FinishReason::kError);
    }
    return prefill_tokens;
  }

  const absl::Time sampled_at = clock_->Now();
  std::vector<std::pair<RequestId, FinishReason>> finished;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& seq = *plan.chunks[i].seq;
    const int32_t begin = seq.num_computed;
    seq.num_computed += plan.chunks[i].num_tokens;
    if (begin < seq.prompt_len) {
      seq.computed_prompt_tokens += std::min(seq.num_computed, seq.prompt_len) - begin;
    }
    kv_->Commit(seq.id, seq.tokens, seq.num_computed);
    if (!batch.sequences[i].want_logits) continue;
    HandleSample(seq,
                 std::span<float>(logits_).subspan(i * static_cast<size_t>(vocab),
                                                   static_cast<size_t>(vocab)),
                 sampled_at, &finished);
  }
  for (const auto& [id, reason] : finished) Finish(id, absl::OkStatus(), reason);
  return prefill_tokens;
}

void EngineImpl::HandleSample(Sequence& seq, std::span<float> logits, absl::Time now,
                              std::vector<std::pair<RequestId, FinishReason>>* finished) {
  SampleInfo info;
  const int32_t token = seq.sampler.Sample(logits, seq.tokens, seq.prompt_len, &info);
  if (!seq.first_token.has_value()) seq.first_token = now;
  seq.tokens.push_back(token);
  const bool at_length_limit = seq.completion_tokens() >= seq.max_new_tokens ||
                               static_cast<int32_t>(seq.tokens.size()) >= seq.max_total_tokens;
  TokenOutput out = seq.output.Process(token, at_length_limit);

  // A stop token is not emitted; only the text it flushed is, when there is some.
  if (out.emit_token || !out.text.empty()) {
    TokenEvent event;
    event.token = out.emit_token ? token : kTextOnlyToken;
    event.text = std::move(out.text);
    if (out.emit_token) {
      event.logprob = info.logprob;
      event.top_logprobs.reserve(info.top_logprobs.size());
      for (const LogprobEntry& e : info.top_logprobs) {
        event.top_logprobs.push_back({e.token, e.logprob});
      }
    }
    seq.sink->OnToken(event);
  }
  if (out.finish.has_value()) finished->emplace_back(seq.id, *out.finish);
}

void EngineImpl::Finish(RequestId id, const absl::Status& status, FinishReason reason) {
  Sequence* found = scheduler_.Find(id);
  std::unique_ptr<Sequence> parked;
  if (found == nullptr) {
    auto it = fetching_.find(id);
    if (it == fetching_.end()) return;  // unknown or already finished (e.g. a late Cancel)
    parked = std::move(it->second);
    fetching_.erase(it);
    found = parked.get();
  }
  const absl::Time now = clock_->Now();
  const bool completed = reason == FinishReason::kStop || reason == FinishReason::kStopString ||
                         reason == FinishReason::kLength;
  bool session_alive = false;
  if (!found->session_id.empty()) {
    session_alive = sessions_.EndTurn(found->session_id, completed ? &found->tokens : nullptr, now);
    // The session keeps its history's blocks for the next turn (its previous blocks
    // are released after the new chain is referenced).
    if (session_alive && completed && found->has_table) {
      kv_->PinSession(found->session_id, found->id, found->tokens);
    }
  }
  if (completed && found->has_table) Export(*found, session_alive);
  std::unique_ptr<Sequence> seq = parked != nullptr ? std::move(parked) : scheduler_.Remove(id);
  if (!seq->admitted_once) ReleaseQueueSlot(*seq);

  Usage usage;
  usage.prompt_tokens = seq->prompt_len;
  usage.cached_tokens = seq->cached_tokens;
  usage.cached_tokens_remote = seq->cached_tokens_remote;
  usage.computed_tokens = seq->computed_prompt_tokens;
  usage.completion_tokens = std::max(0, seq->completion_tokens());
  usage.queue_time = seq->first_scheduled.value_or(now) - seq->submit_time;
  usage.time_to_first_token =
      seq->first_token.has_value() ? *seq->first_token - seq->submit_time : absl::ZeroDuration();
  usage.total_time = now - seq->submit_time;
  absl::Status final_status = status;
  if (reason == FinishReason::kDeadline)
    final_status = absl::DeadlineExceededError("request deadline passed");
  // Stats() reflects the released blocks before the sink hears of the finish.
  PublishStats(0.0);
  seq->sink->OnFinish(final_status, reason, usage);
  ++requests_finished_total_;  // published with the next snapshot: after OnFinish returned
}

void EngineImpl::ExpireDeadlines(absl::Time now) {
  std::vector<RequestId> expired;
  for (const auto* q : {&scheduler_.running(), &scheduler_.waiting()}) {
    for (const auto& seq : *q) {
      if (now >= seq->deadline) expired.push_back(seq->id);
    }
  }
  for (const auto& [id, seq] : fetching_) {
    if (now >= seq->deadline) expired.push_back(id);
  }
  for (RequestId id : expired) Finish(id, absl::OkStatus(), FinishReason::kDeadline);
}

void EngineImpl::ApplySessionEvents() {
  for (const SessionStore::Event& e : sessions_.TakeEvents()) {
    if (e.kind == SessionStore::Event::Kind::kForked) {
      kv_->ForkSession(e.parent_id, e.id);
    } else {
      kv_->ReleaseSession(e.id);
    }
  }
}

void EngineImpl::Admit(std::unique_ptr<Sequence> seq) {
  if (remote_tier_ != nullptr && !seq->remote_asked) {
    seq->remote_asked = true;
    // The blocks a prefix hit may cover (the last token is always computed).
    const int32_t bt = kv_->block_tokens();
    const int32_t full = (static_cast<int32_t>(seq->tokens.size()) - 1) / bt;
    if (full >= options_.remote.min_fetch_blocks) {
      RemoteTier::FetchJob job;
      job.chain = kv_->ChainHashes(seq->root, seq->tokens, full);
      job.local_blocks = kv_->CachedPrefixBlocks(seq->root, seq->tokens, job.chain);
      if (full - job.local_blocks >= options_.remote.min_fetch_blocks) {
        job.id = seq->id;
        job.partition = seq->root;
        job.tokens.assign(seq->tokens.begin(), seq->tokens.begin() + full * bt);
        job.prefill_seconds_per_token = prefill_seconds_per_token_;
        job.deadline = seq->deadline;
        fetching_.emplace(seq->id, std::move(seq));
        remote_tier_->Fetch(std::move(job));
        return;
      }
    }
  }
  scheduler_.Add(std::move(seq));
}

void EngineImpl::OnFetched(RemoteTier::FetchResult result) {
  auto it = fetching_.find(result.id);
  if (it == fetching_.end()) return;  // finished meanwhile (cancel, deadline, shutdown)
  std::unique_ptr<Sequence> seq = std::move(it->second);
  fetching_.erase(it);
  if (!result.payloads.empty()) {
    const int32_t end = result.first + static_cast<int32_t>(result.payloads.size());
    const std::vector<cache::BlockHash> chain = kv_->ChainHashes(seq->root, seq->tokens, end);
    const int32_t cached =
        kv_->ImportBlocks(seq->root, seq->tokens, chain, result.first, result.payloads);
    if (cached > result.first) {
      seq->remote_from = result.first * kv_->block_tokens();
      seq->remote_to = cached * kv_->block_tokens();
    }
  }
  scheduler_.Add(std::move(seq));
}

void EngineImpl::Export(const Sequence& seq, bool session_alive) {
  if (remote_tier_ == nullptr) return;
  RemoteTier::StoreJob job;
  job.key = ++next_export_key_;
  job.blocks = kv_->PinExport(job.key, seq.id, seq.tokens);
  if (session_alive) job.session = SessionRecordOf(seq.session_id, seq.root);
  if (job.blocks.empty() && !job.session.has_value()) {
    kv_->ReleaseExport(job.key);
    return;
  }
  job.partition = seq.root;
  job.tokens.assign(seq.tokens.begin(),
                    seq.tokens.begin() + job.blocks.size() * kv_->block_tokens());
  const uint64_t key = job.key;
  if (!remote_tier_->Store(std::move(job))) kv_->ReleaseExport(key);  // dropped, counted
}

std::optional<cache::RemoteSession> EngineImpl::SessionRecordOf(const std::string& id,
                                                         const cache::BlockHash& root) {
  std::optional<SessionStore::Snapshot> snap = sessions_.GetSnapshot(id);
  if (!snap.has_value()) return std::nullopt;
  cache::RemoteSession r;
  r.id = id;
  r.partition = kv_->RootHash("");
  r.tokens = std::move(snap->history);
  r.turn_ends = std::move(snap->turn_ends);
  const size_t full = r.tokens.size() / static_cast<size_t>(kv_->block_tokens());
  if (full > 0) {
    r.has_head = true;
    r.head = kv_->ChainHashes(root, r.tokens, static_cast<int32_t>(full)).back();
  }
  r.owner = options_.remote.owner;
  r.tenant = std::move(snap->owner);
  r.ttl = snap->ttl;
  return r;
}

void EngineImpl::PublishSession(const std::string& id) {
  if (remote_tier_ == nullptr) return;
  std::optional<cache::RemoteSession> record = SessionRecordOf(id, kv_->RootHash(""));
  if (record.has_value()) remote_tier_->PutSessionNow(*record).IgnoreError();
}

absl::StatusOr<cache::RemoteSession> EngineImpl::RemoteRecord(const std::string& id,
                                                       const std::string& tenant) {
  if (remote_tier_ == nullptr) return absl::NotFoundError("no session cache service");
  absl::StatusOr<cache::RemoteSession> record = remote_tier_->GetSession(id);
  if (!record.ok()) return record.status();
  // Another model's (or layout's) session is not ours to continue.
  if (record->partition != kv_->RootHash("")) {
    return absl::NotFoundError("the session belongs to another model");
  }
  if (record->tenant != tenant) return SessionStore::SessionNotFound(id);
  const int32_t vocab = model_.config().vocab_size;
  for (int32_t t : record->tokens) {
    if (t < 0 || t >= vocab) return absl::DataLossError("session record holds invalid tokens");
  }
  // The number of turn ends is the record's version (SyncSession): as the service
  // checks on writes, ascending within the history, the last one at its end.
  const int64_t n = static_cast<int64_t>(record->tokens.size());
  int32_t previous = 0;
  for (int32_t end : record->turn_ends) {
    if (end < previous || end > n) {
      return absl::DataLossError("session record holds invalid turn ends");
    }
    previous = end;
  }
  if (!record->turn_ends.empty() && previous != n) {
    return absl::DataLossError("session record's last turn end is not its history's end");
  }
  return record;
}

void EngineImpl::SyncSession(const std::string& id, const std::string& tenant) {
  if (remote_tier_ == nullptr) return;
  const absl::Time now = clock_->Now();
  const bool here = sessions_.Get(id, tenant, now).ok();
  absl::StatusOr<cache::RemoteSession> record = RemoteRecord(id, tenant);
  if (!record.ok()) return;
  if (here) {
    if (sessions_.AdoptNewer(id, tenant, std::move(record->tokens), std::move(record->turn_ends),
                             now)) {
      sessions_refreshed_.fetch_add(1);
    }
    return;
  }
  const absl::Status restored = sessions_.Restore(id, record->tenant, std::move(record->tokens),
                                                  std::move(record->turn_ends), record->ttl, now);
  if (restored.ok()) sessions_restored_.fetch_add(1);
}

void EngineImpl::PublishStats(double step_seconds) {
  const cache::KvCacheStats kv = kv_->stats();
  EngineStats s;
  s.running = static_cast<int32_t>(scheduler_.running().size());
  // Sequences waiting for a remote fetch count as waiting.
  s.waiting = static_cast<int32_t>(scheduler_.waiting().size() + fetching_.size());
  s.blocks_total = kv.blocks_total;
  s.blocks_used = kv.blocks_used;
  s.blocks_cached = kv.blocks_cached;
  s.blocks_free = kv.blocks_free;
  s.prefix_queries_total = kv.prefix_queries_total;
  s.prefix_hits_total = kv.prefix_hits_total;
  s.evictions_total = kv.evictions_total;
  s.session_blocks = kv.session_blocks;
  s.session_reclaims_total = kv.session_reclaims_total;
  s.preemptions_total = scheduler_.preemptions_total();
  s.steps_total = steps_total_;
  s.requests_finished_total = requests_finished_total_;
  s.open_sessions = sessions_.size();
  if (remote_tier_ != nullptr) {
    s.remote = remote_tier_->stats();
    s.remote.sessions_restored_total = sessions_restored_.load();
    s.remote.sessions_refreshed_total = sessions_refreshed_.load();
  }
  s.last_step_seconds = step_seconds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting += static_cast<int32_t>(inbox_.size());
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (step_seconds == 0.0) s.last_step_seconds = stats_.last_step_seconds;
  stats_ = s;
}

}  // namespace

std::string TenantCacheSalt(const std::string& tenant, const std::string& cache_salt) {
  if (tenant.empty()) return cache_salt;
  std::string salt;
  salt.reserve(tenant.size() + 1 + cache_salt.size());
  salt.append(tenant);
  salt.push_back('\0');
  salt.append(cache_salt);
  return salt;
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const Engine::Options& options,
                                                     const model::Model& model,
                                                     std::unique_ptr<backends::Backend> backend) {
  absl::Status status = ValidateOptions(options);
  if (!status.ok()) return status;
  if (backend == nullptr) return absl::InvalidArgumentError("backend must not be null");
  const model::KvLayout layout = options.KvLayoutFor(model.config());
  if (!SameLayout(layout, backend->kv_layout())) {
    return absl::InvalidArgumentError(
        "the backend's KV layout differs from Options::KvLayoutFor(model.config())");
  }
  cache::KvCacheManager::Options kv_options;
  kv_options.layout = layout;
  kv_options.budget_bytes = options.kv_budget_bytes;
  kv_options.populate = options.kv_prefault;
  kv_options.model_fingerprint = model.fingerprint();
  kv_options.kv_heads = model.config().n_kv_heads;
  kv_options.sliding_window_tokens = model.config().sliding_window;
  auto kv = cache::KvCacheManager::Create(kv_options);
  if (!kv.ok()) return kv.status();
  // A vocabulary without a usable tokenizer (some synthetic models) still serves token
  // ids; only text deltas and stop strings need the tokenizer.
  auto tokenizer = model::Tokenizer::Create(model.vocab());
  std::unique_ptr<model::Tokenizer> tok = tokenizer.ok() ? *std::move(tokenizer) : nullptr;
  return std::unique_ptr<Engine>(
      new EngineImpl(options, model, std::move(backend), *std::move(kv), std::move(tok)));
}

}  // namespace kvserve::engine
