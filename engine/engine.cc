// The engine loop: one step thread owns the scheduler, the KV cache manager and the
// backend; API calls from any thread talk to it through a mutex-protected inbox.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
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
#include "absl/container/flat_hash_set.h"
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
#include "engine/session_manager.h"
#include "engine/session_store.h"
#include "engine/speculation.h"
#include "engine/speculation_governor.h"
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

}  // namespace

absl::Status ValidateEngineOptions(const Engine::Options& o) {
  auto bad = [](const char* name, auto value) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is out of range: ", value));
  };
  auto at_least = [](const char* name, int64_t value, int64_t least) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be >= ", least, ", got ", value));
  };
  if (o.block_tokens < 1 || o.block_tokens > 4096) return bad("block_tokens", o.block_tokens);
  if (o.kv_dtype != model::DType::kF32 && o.kv_dtype != model::DType::kF16) {
    return absl::InvalidArgumentError("kv_dtype must be f32 or f16");
  }
  if (o.max_running_sequences < 1) {
    return at_least("max_running_sequences", o.max_running_sequences, 1);
  }
  if (o.max_step_tokens < 1) return at_least("max_step_tokens", o.max_step_tokens, 1);
  if (o.max_waiting_requests < 1) {
    return at_least("max_waiting_requests", o.max_waiting_requests, 1);
  }
  if (o.max_waiting_prompt_tokens < 1) {
    return at_least("max_waiting_prompt_tokens", o.max_waiting_prompt_tokens, 1);
  }
  if (o.max_sessions < 1) return at_least("max_sessions", o.max_sessions, 1);
  if (o.max_sessions_per_tenant < 0) {
    return absl::InvalidArgumentError("max_sessions_per_tenant must be >= 0 (0 = no limit)");
  }
  if (o.max_session_tokens < 0) {
    return absl::InvalidArgumentError("max_session_tokens must be >= 0 (0 = context length)");
  }
  if (o.default_session_ttl <= absl::ZeroDuration() || o.max_session_ttl < o.default_session_ttl) {
    return absl::InvalidArgumentError("default_session_ttl must be > 0 and <= max_session_ttl");
  }
  if (o.max_tokens_limit < 1) return bad("max_tokens_limit", o.max_tokens_limit);
  if (o.session_lease < absl::Seconds(1) || o.session_lease > absl::Hours(1)) {
    return absl::InvalidArgumentError("session_lease must be in [1s, 1h]");
  }
  if (o.remote.timeout <= absl::ZeroDuration() || o.remote.timeout > absl::Minutes(1)) {
    return absl::InvalidArgumentError("remote.timeout must be in (0, 1m]");
  }
  if (!(o.remote.max_import_fraction > 0.0 && o.remote.max_import_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote.max_import_fraction must be in (0, 1], got ", o.remote.max_import_fraction));
  }
  if (o.remote.max_pending_stores < 1) {
    return at_least("remote.max_pending_stores", o.remote.max_pending_stores, 1);
  }
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
  return ValidateSpeculativeOptions(o.speculative);
}

namespace {

class EngineImpl final : public Engine {
 public:
  EngineImpl(const Options& options, const model::Model& model,
             std::unique_ptr<backends::Backend> backend, std::unique_ptr<cache::KvCacheManager> kv,
             std::unique_ptr<model::Tokenizer> tokenizer, std::unique_ptr<DraftSource> draft_source)
      : options_(options),
        model_(model),
        clock_(options.clock != nullptr ? options.clock : common::Clock::Real()),
        max_session_tokens_(options.max_session_tokens > 0 ? options.max_session_tokens
                                                           : model.config().context_length),
        kv_capacity_tokens_(kv->SequenceCapacityTokens(options.max_step_tokens)),
        kv_layout_(kv->layout()),
        backend_(std::move(backend)),
        kv_(std::move(kv)),
        tokenizer_(std::move(tokenizer)),
        context_limits_{model.config().context_length, kv_capacity_tokens_},
        sessions_(SessionManager::Options{SessionStore::Options{
                                              options.max_sessions, options.max_sessions_per_tenant,
                                              max_session_tokens_, options.default_session_ttl,
                                              options.max_session_ttl, context_limits_},
                                          options.session_lease, options.remote.timeout,
                                          options.remote.owner, model.config().vocab_size},
                  options.remote_cache, kv_.get(),
                  options.clock != nullptr ? options.clock : common::Clock::Real()),
        scheduler_(Scheduler::Options{options.max_running_sequences, options.max_step_tokens},
                   kv_.get()),
        owned_draft_source_(draft_source != nullptr ? std::move(draft_source)
                                                    : CreateDraftSource(options.speculative)),
        draft_source_(options.speculative.custom_source != nullptr
                          ? options.speculative.custom_source
                          : owned_draft_source_.get()),
        governor_(options.speculative.explore_every) {
    if (draft_source_ != nullptr) {
      speculative_.source = std::string(draft_source_->name());
      speculative_.accepted_length_counts.assign(
          static_cast<size_t>(options.speculative.draft_max) + 1, 0);
    }
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

  ~EngineImpl() override {
    Shutdown(absl::InfinitePast());
    // Session calls still on the manager's worker answer now, while the inbox they may
    // wake is alive.
    sessions_.Stop();
  }

  absl::StatusOr<RequestId> Submit(Request request, std::shared_ptr<RequestSink> sink) override;
  void Cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    // A turn still starting (waiting for the session cache) is cancelled on arrival.
    if (starting_ids_.contains(id)) {
      cancelled_starting_.insert(id);
    } else {
      cancels_.push_back(id);
    }
    cv_.notify_one();
  }

  void OpenSessionAsync(absl::Duration ttl, const std::string& tenant,
                        SessionCallback done) override {
    if (ShuttingDown()) return done(absl::UnavailableError("engine is shutting down"));
    sessions_.Open(ttl, tenant, std::move(done));
  }
  void ForkSessionAsync(const std::string& parent_id, absl::Duration ttl, const std::string& tenant,
                        SessionCallback done) override {
    if (ShuttingDown()) return done(absl::UnavailableError("engine is shutting down"));
    sessions_.Fork(parent_id, ttl, tenant, [this, done = std::move(done)](auto info) {
      Wake();  // the step thread applies the fork to the KV pins
      done(std::move(info));
    });
  }
  void CloseSessionAsync(const std::string& id, const std::string& tenant,
                         StatusCallback done) override {
    sessions_.Close(id, tenant, [this, done = std::move(done)](absl::Status status) {
      Wake();  // the step thread releases the session's KV pins
      done(std::move(status));
    });
  }
  void GetSessionAsync(const std::string& id, const std::string& tenant,
                       SessionCallback done) override {
    sessions_.Get(id, tenant, [this, done = std::move(done)](absl::StatusOr<SessionInfo> info) {
      if (!info.ok()) Wake();  // it may just have expired: release its KV blocks
      done(std::move(info));
    });
  }

  model::KvLayout kv_layout() const override { return kv_layout_; }

  SubmitLimits submit_limits() const override {
    return SubmitLimits{options_.max_tokens_limit, options_.max_cache_salt_bytes,
                        options_.stop_limits};
  }

  EngineStats Stats() const override {
    EngineStats s;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      s = stats_;
    }
    // Sessions and the session cache move on worker threads, also while no step runs (an
    // idle engine publishes no snapshot, and session calls alone wake no step): read now.
    FillSessionStats(s);
    return s;
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
  // Samples the next token from `logits` (one row: 1 + drafts.size() rows with drafts,
  // row j following drafts[j - 1]), emits it and notes a finish; with drafts, goes on
  // to the next row while the sampled token is the draft (each accepted draft's
  // position then counts as computed).
  // Returns how many drafts were compared and accepted.
  struct DraftOutcome {
    int32_t compared = 0;
    int32_t accepted = 0;
  };
  DraftOutcome HandleSample(Sequence& seq, std::span<float> logits, std::span<const int32_t> drafts,
                            absl::Time now,
                            std::vector<std::pair<RequestId, FinishReason>>* finished);
  // Speculative decoding: appends draft tokens to the decoding sequences (when few
  // enough decode) and returns them.
  std::vector<Sequence*> ProposeDrafts();
  // One token of HandleSample: sampled (against `draft` when >= 0; *accepted tells
  // whether it is the draft), appended and emitted. True when the sequence finished.
  bool SampleOne(Sequence& seq, std::span<float> logits, int32_t draft, absl::Time now,
                 bool* accepted, std::vector<std::pair<RequestId, FinishReason>>* finished);
  void Finish(RequestId id, const absl::Status& status, FinishReason reason);
  void ExpireDeadlines(absl::Time now);
  void PublishStats(double step_seconds);
  // The counters of sessions and the session cache (thread-safe sources) into `s`.
  void FillSessionStats(EngineStats& s) const;
  void ReleaseQueueSlot(const Sequence& seq);

  // A sequence for request `id` over `context` (history + prompt for a turn).
  std::unique_ptr<Sequence> MakeSequence(RequestId id, Sampler sampler, const Request& request,
                                         std::shared_ptr<RequestSink> sink,
                                         std::vector<int32_t> context, absl::Time now);
  // Counts a request of `tokens` prompt tokens against the queue limits
  // (RESOURCE_EXHAUSTED when full, UNAVAILABLE when shutting down).
  absl::Status ReserveQueueSlot(int64_t tokens);
  // A session turn whose start waits for the session cache service (Submit): its
  // sequence, or its refusal, arrives through the inbox.
  void SubmitRemoteTurn(RequestId id, Sampler sampler, Request request,
                        std::shared_ptr<RequestSink> sink, absl::Time now);
  // Step thread: the final answer of request `id`, whose turn's commit ended with
  // `status` (engine/session_manager.h).
  void OnCommitted(RequestId id, const absl::Status& status);
  // Step thread: routes an arrived sequence to the scheduler, or first to a remote
  // fetch; takes fetch results and finished exports back.
  void Admit(std::unique_ptr<Sequence> seq);
  void OnFetched(RemoteTier::FetchResult result);
  // Writes the committed blocks of finished `seq` behind.
  void Export(const Sequence& seq);

  const Options options_;
  const model::Model& model_;
  const common::Clock* const clock_;
  const int32_t max_session_tokens_;
  const int64_t kv_capacity_tokens_;
  const model::KvLayout kv_layout_;                    // kv_'s, readable from any thread
  std::unique_ptr<backends::Backend> backend_;         // step thread
  std::unique_ptr<cache::KvCacheManager> kv_;          // step thread
  const std::unique_ptr<model::Tokenizer> tokenizer_;  // immutable; may be null
  const ContextLimits context_limits_;
  SessionManager sessions_;  // thread-safe; its KV side on the step thread
  Scheduler scheduler_;      // step thread
  const std::unique_ptr<DraftSource> owned_draft_source_;
  DraftSource* const draft_source_;  // step thread; null: no speculation
  SpeculativeStats speculative_;     // step thread
  SpeculationGovernor governor_;     // step thread
  // What ProposeDrafts saw and decided for the current step (the governor's measurement).
  int32_t step_decoding_ = 0;
  bool step_speculating_ = false;

  // Step-thread state. Session KV blocks live in kv_'s session tier.
  std::vector<float> logits_;  // [batch, vocab]
  // Sequences waiting for a remote fetch (not yet in the scheduler).
  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> fetching_;
  uint64_t next_export_key_ = 0;
  // Measured prefill cost (smoothed), for the fetch-or-recompute estimate; 0 = unknown.
  double prefill_seconds_per_token_ = 0.0;
  int64_t steps_total_ = 0;
  int64_t requests_finished_total_ = 0;
  // Requests whose turn is being committed: their final answer, sent once it is.
  struct Committing {
    std::shared_ptr<RequestSink> sink;
    FinishReason reason;
    Usage usage;
  };
  absl::flat_hash_map<RequestId, Committing> committing_;

  // The inbox.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<RemoteTier::FetchResult> fetched_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> exported_ ABSL_GUARDED_BY(mu_);  // export keys to release
  // Session turns refused before they started (the session cache's answer).
  struct Refused {
    RequestId id;
    std::shared_ptr<RequestSink> sink;
    absl::Status status;
    int64_t queued_tokens;
    absl::Time submit_time;
  };
  std::vector<Refused> refused_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<RequestId, absl::Status>> committed_ ABSL_GUARDED_BY(mu_);
  // Turns handed to the session manager and not yet back (sequence or refusal), and
  // those of them cancelled meanwhile.
  absl::flat_hash_set<RequestId> starting_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<RequestId> cancelled_starting_ ABSL_GUARDED_BY(mu_);
  int32_t starting_turns_ ABSL_GUARDED_BY(mu_) = 0;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_);
  int32_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet admitted
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_ ABSL_GUARDED_BY(stats_mu_);

  std::atomic<RequestId> next_id_{1};
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
  const RequestId id = next_id_.fetch_add(1);
  auto sampler =
      Sampler::Create(request.sampling, config.vocab_size, Mix64(options_.seed ^ Mix64(id)));
  if (!sampler.ok()) return sampler.status();

  const bool is_turn = !request.session_id.empty();
  if (is_turn && sessions_.has_remote()) {
    if (absl::Status s = ReserveQueueSlot(static_cast<int64_t>(request.prompt_tokens.size()));
        !s.ok()) {
      return s;
    }
    SubmitRemoteTurn(id, *std::move(sampler), std::move(request), std::move(sink), now);
    return id;
  }
  const std::optional<int32_t> bos =
      request.add_bos ? std::optional<int32_t>(model_.vocab().bos_id) : std::nullopt;
  std::vector<int32_t> context;
  SessionManager::Turn turn;
  if (is_turn) {
    // Without a session cache service the turn starts here, at once: BOS is decided
    // under the session's lock (only an empty history gets it).
    absl::StatusOr<SessionManager::Turn> begun;
    sessions_.BeginTurn(
        SessionManager::TurnRequest{id, request.session_id, request.tenant, request.prompt_tokens,
                                    bos, request.turn_separator, request.turn_end_token,
                                    request.deadline},
        [&begun](absl::StatusOr<SessionManager::Turn> t) { begun = std::move(t); });
    if (!begun.ok()) return begun.status();
    turn = *std::move(begun);
    context = std::move(turn.context);
  } else {
    if (bos.has_value()) context.push_back(*bos);
    context.insert(context.end(), request.prompt_tokens.begin(), request.prompt_tokens.end());
    // (BeginTurn checks a turn's context under the session's lock.)
    if (absl::Status s = CheckContextFits(context_limits_, context.size(), 0); !s.ok()) return s;
  }
  const int64_t n = static_cast<int64_t>(context.size());
  // Build the sequence before taking the inbox lock (the sampler allocates [vocab]).
  std::unique_ptr<Sequence> seq =
      MakeSequence(id, *std::move(sampler), request, std::move(sink), std::move(context), now);
  if (absl::Status s = ReserveQueueSlot(n); !s.ok()) {
    if (is_turn) sessions_.AbandonTurn(request.session_id, turn);
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return id;
}

std::unique_ptr<Sequence> EngineImpl::MakeSequence(RequestId id, Sampler sampler,
                                                   const Request& request,
                                                   std::shared_ptr<RequestSink> sink,
                                                   std::vector<int32_t> context, absl::Time now) {
  const model::ModelConfig& config = model_.config();
  auto seq = std::make_unique<Sequence>(
      id, std::move(sampler),
      OutputProcessor(request.sampling, model_.vocab().eos_id, tokenizer_.get(), context.back()));
  seq->sink = std::move(sink);
  seq->prompt_len = static_cast<int32_t>(context.size());
  seq->max_new_tokens = request.sampling.max_tokens;
  int64_t max_total = std::min<int64_t>(config.context_length, kv_capacity_tokens_);
  if (!request.session_id.empty()) max_total = std::min<int64_t>(max_total, max_session_tokens_);
  seq->max_total_tokens = static_cast<int32_t>(max_total);
  // immutable part of kv_: any thread
  seq->root = kv_->RootHash(TenantCacheSalt(request.tenant, request.cache_salt));
  seq->session_id = request.session_id;
  seq->arrival = static_cast<int64_t>(id);
  seq->submit_time = now;
  seq->deadline = request.deadline;
  seq->tokens = std::move(context);
  return seq;
}

absl::Status EngineImpl::ReserveQueueSlot(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return absl::UnavailableError("engine is shutting down");
  if (queued_requests_ >= options_.max_waiting_requests ||
      queued_tokens_ + tokens > options_.max_waiting_prompt_tokens) {
    return absl::ResourceExhaustedError(
        absl::StrCat("engine overloaded: ", queued_requests_, " requests with ", queued_tokens_,
                     " prompt tokens are waiting (limits ", options_.max_waiting_requests, " and ",
                     options_.max_waiting_prompt_tokens, ")"));
  }
  ++queued_requests_;
  queued_tokens_ += tokens;
  return absl::OkStatus();
}

void EngineImpl::SubmitRemoteTurn(RequestId id, Sampler sampler, Request request,
                                  std::shared_ptr<RequestSink> sink, absl::Time now) {
  // What the sequence is built from once the session's record answered (std::function
  // needs a copyable callback: the move-only parts travel in a shared struct).
  struct Pending {
    Sampler sampler;
    Request request;
    std::shared_ptr<RequestSink> sink;
  };
  auto pending =
      std::make_shared<Pending>(Pending{std::move(sampler), std::move(request), std::move(sink)});
  const Request& r = pending->request;
  const int64_t queued = static_cast<int64_t>(r.prompt_tokens.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++starting_turns_;
    starting_ids_.insert(id);
  }
  sessions_.BeginTurn(
      SessionManager::TurnRequest{
          id, r.session_id, r.tenant, r.prompt_tokens,
          r.add_bos ? std::optional<int32_t>(model_.vocab().bos_id) : std::nullopt,
          r.turn_separator, r.turn_end_token, r.deadline},
      [this, id, pending, queued, now](absl::StatusOr<SessionManager::Turn> turn) {
        if (!turn.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          refused_.push_back(Refused{id, pending->sink, turn.status(), queued, now});
          --starting_turns_;
          starting_ids_.erase(id);
          cancelled_starting_.erase(id);
          cv_.notify_one();
          return;
        }
        std::unique_ptr<Sequence> seq =
            MakeSequence(id, std::move(pending->sampler), pending->request, pending->sink,
                         std::move(turn->context), now);
        seq->session_version = turn->version;
        seq->lease_holder = std::move(turn->lease_holder);
        std::lock_guard<std::mutex> lock(mu_);
        // The slot was counted with the new tokens only; ReleaseQueueSlot gives back the
        // whole context.
        queued_tokens_ += seq->prompt_len - queued;
        inbox_.push_back(std::move(seq));
        --starting_turns_;
        starting_ids_.erase(id);
        if (cancelled_starting_.erase(id) > 0) cancels_.push_back(id);  // after its Admit
        cv_.notify_one();
      });
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
    std::vector<Refused> refused;
    std::vector<std::pair<RequestId, absl::Status>> committed;
    bool shutting_down = false;
    bool session_work = false;  // turns starting or committing: the loop must not end
    absl::Time shutdown_deadline;
    const bool busy = !scheduler_.running().empty() || !scheduler_.waiting().empty();
    const std::optional<absl::Time> next_expiry = busy ? std::nullopt : sessions_.NextExpiry();
    const absl::Time before_wait = clock_->Now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto has_input = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !inbox_.empty() || !cancels_.empty() || !fetched_.empty() || !exported_.empty() ||
               !refused_.empty() || !committed_.empty() || wake_ ||
               (shutting_down_ && starting_turns_ == 0 && committing_.empty());
      };
      if (!busy) {
        if (next_expiry.has_value()) {
          // Until the next expiry can be swept (the sweep runs at most once a second, so
          // an expired session does not spin the loop), re-checked at least every second
          // (a session opened meanwhile may expire earlier). On the engine's clock.
          const absl::Time due = std::max(*next_expiry, sessions_.next_sweep());
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
      refused.swap(refused_);
      committed.swap(committed_);
      session_work = starting_turns_ > 0;
      wake_ = false;
      shutting_down = shutting_down_;
      shutdown_deadline = shutdown_deadline_;
    }

    for (uint64_t key : exported) kv_->ReleaseExport(key);
    for (auto& result : fetched) OnFetched(std::move(result));
    for (auto& seq : arrived) Admit(std::move(seq));
    for (Refused& r : refused) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --queued_requests_;
        queued_tokens_ -= r.queued_tokens;
      }
      PublishStats(0.0);  // Stats() counts what refused it before the sink hears
      Usage usage;
      usage.total_time = clock_->Now() - r.submit_time;
      r.sink->OnFinish(r.status, FinishReason::kError, usage);
      ++requests_finished_total_;
    }
    for (const auto& [id, status] : committed) OnCommitted(id, status);
    for (RequestId id : cancels) {
      Finish(id, absl::CancelledError("request cancelled"), FinishReason::kCancelled);
    }
    const absl::Time now = clock_->Now();
    sessions_.Maintain(now, kv_.get());
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
      // Turns still starting or committing answer within the session cache's timeout;
      // every request hears its end before the loop does.
      if (!session_work && committing_.empty()) {
        sessions_.ReleaseAll(kv_.get());
        PublishStats(0.0);
        return;
      }
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

std::vector<Sequence*> EngineImpl::ProposeDrafts() {
  std::vector<Sequence*> drafted;
  if (draft_source_ == nullptr) return drafted;
  int32_t decoding = 0;
  for (const auto& seq : scheduler_.running()) decoding += seq->remaining_tokens() == 1 ? 1 : 0;
  step_decoding_ = decoding;
  step_speculating_ = false;
  if (decoding == 0 || decoding > options_.speculative.max_batch) return drafted;
  // Not while a prompt is computed or waits: such a step is bound by arithmetic, where
  // draft rows cost as much as real ones.
  if (decoding != std::ssize(scheduler_.running()) || !scheduler_.waiting().empty()) {
    return drafted;
  }
  if (options_.speculative.adaptive && !governor_.ShouldSpeculate(decoding)) return drafted;
  step_speculating_ = true;
  // Drafts take what the step budget leaves after one token per running sequence, so they
  // never push a younger sequence out of the step.
  int32_t spare = options_.max_step_tokens - static_cast<int32_t>(scheduler_.running().size());
  std::vector<int32_t> proposal;
  for (const auto& ptr : scheduler_.running()) {
    Sequence& seq = *ptr;
    if (seq.remaining_tokens() != 1 || seq.completion_tokens() < 1) continue;
    const int32_t server_max = options_.speculative.draft_max;
    const int32_t request_max = seq.sampler.params().max_draft_tokens.value_or(server_max);
    if (seq.draft_len == 0) seq.draft_len = server_max;
    const int32_t size = static_cast<int32_t>(seq.tokens.size());
    // Every draft accepted plus the token after them must stay within the limits.
    const int32_t k = std::min({seq.draft_len, request_max, server_max, spare,
                                seq.max_new_tokens - seq.completion_tokens() - 1,
                                seq.max_total_tokens - size - 1});
    if (k < 1) continue;
    proposal.clear();
    draft_source_->Propose(seq.id, seq.tokens, k, &proposal);
    if (proposal.empty()) continue;
    if (static_cast<int32_t>(proposal.size()) > k) proposal.resize(static_cast<size_t>(k));
    seq.tokens.insert(seq.tokens.end(), proposal.begin(), proposal.end());
    seq.draft_tokens = static_cast<int32_t>(proposal.size());
    spare -= seq.draft_tokens;
    drafted.push_back(&seq);
  }
  return drafted;
}

int32_t EngineImpl::Step() {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<Sequence*> drafted = ProposeDrafts();
  StepPlan plan = scheduler_.Schedule();
  // Drafts of sequences that do not run this step (budget, or out of blocks) are dropped
  // (the scheduler already dropped those of preempted ones).
  for (Sequence* seq : drafted) {
    const bool runs = std::any_of(plan.chunks.begin(), plan.chunks.end(),
                                  [seq](const StepPlan::Chunk& c) { return c.seq == seq; });
    if (!runs) seq->DropDrafts();
  }
  for (Sequence* seq : plan.out_of_blocks) {
    // The pool cannot hold this sequence's next token even alone: its context is full.
    Finish(seq->id, absl::OkStatus(), FinishReason::kLength);
  }
  if (plan.chunks.empty()) return 0;
  int32_t prefill_tokens = 0;
  bool decode_only = true;    // every chunk is a decode row, with or without drafts
  int64_t tokens_before = 0;  // to count what the step emits
  for (const StepPlan::Chunk& c : plan.chunks) {
    const bool drafts = c.seq->draft_tokens > 0;
    if (c.num_tokens > 1 && !drafts) prefill_tokens += c.num_tokens;
    decode_only &= (drafts || c.num_tokens == 1) && c.seq->num_computed >= c.seq->prompt_len;
    tokens_before += static_cast<int64_t>(c.seq->tokens.size()) - c.seq->draft_tokens;
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
    if (seq.draft_tokens > 0) {
      // The next token and the drafts the budget left in: every position's logits.
      in.want_logits = true;
      in.logits_rows = c.num_tokens;
    }
    batch.sequences.push_back(in);
  }
  logits_.resize(backends::LogitRowCount(batch) * static_cast<size_t>(vocab));
  const absl::Status status = backend_->Forward(batch, logits_);
  if (!status.ok()) {
    for (const StepPlan::Chunk& c : plan.chunks) {
      c.seq->DropDrafts();
      Finish(c.seq->id, status, FinishReason::kError);
    }
    return prefill_tokens;
  }

  const absl::Time sampled_at = clock_->Now();
  const std::vector<size_t> rows = backends::LogitRowStarts(batch);
  std::vector<std::pair<RequestId, FinishReason>> finished;
  std::vector<int32_t> drafts;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& seq = *plan.chunks[i].seq;
    const std::span<float> logits = std::span<float>(logits_).subspan(
        rows[i] * static_cast<size_t>(vocab),
        static_cast<size_t>(batch.sequences[i].logits_rows) * static_cast<size_t>(vocab));
    if (seq.draft_tokens > 0) {
      // Verification: the next token's position is computed; each accepted draft's is too.
      const size_t verified = static_cast<size_t>(plan.chunks[i].num_tokens - 1);
      drafts.assign(seq.tokens.end() - seq.draft_tokens,
                    seq.tokens.end() - seq.draft_tokens + static_cast<ptrdiff_t>(verified));
      seq.DropDrafts();
      seq.num_computed += 1;
      const DraftOutcome d = HandleSample(seq, logits, drafts, sampled_at, &finished);
      seq.drafts_proposed += d.compared;
      seq.drafts_accepted += d.accepted;
      seq.draft_len = NextDraftLength(seq.draft_len, d.compared, d.accepted,
                                      options_.speculative.draft_max, draft_source_->PacesItself());
      if (d.compared > 0) {
        ++speculative_.verifications_total;
        speculative_.draft_tokens_total += d.compared;
        speculative_.accepted_tokens_total += d.accepted;
        ++speculative_.accepted_length_counts[static_cast<size_t>(d.accepted)];
      }
      kv_->Commit(seq.id, seq.tokens, seq.num_computed);
      continue;
    }
    const int32_t begin = seq.num_computed;
    seq.num_computed += plan.chunks[i].num_tokens;
    if (begin < seq.prompt_len) {
      seq.computed_prompt_tokens += std::min(seq.num_computed, seq.prompt_len) - begin;
    }
    kv_->Commit(seq.id, seq.tokens, seq.num_computed);
    if (!batch.sequences[i].want_logits) continue;
    const size_t finished_before = finished.size();
    HandleSample(seq, logits, {}, sampled_at, &finished);
    // The prompt's end: decoding starts, with drafts if few enough sequences run (else
    // the source catches up when it is first asked, if ever).
    if (begin < seq.prompt_len && finished.size() == finished_before && draft_source_ != nullptr &&
        seq.sampler.params().max_draft_tokens.value_or(1) > 0 &&
        std::ssize(plan.chunks) <= options_.speculative.max_batch) {
      draft_source_->Prepare(seq.id, seq.tokens);
    }
  }
  if (decode_only && draft_source_ != nullptr && options_.speculative.adaptive &&
      step_decoding_ > 0 && step_decoding_ <= options_.speculative.max_batch) {
    // Taught before the finishes below release their sequences.
    int64_t emitted = -tokens_before;
    for (const StepPlan::Chunk& c : plan.chunks) {
      emitted += static_cast<int64_t>(c.seq->tokens.size());
    }
    governor_.Record(
        step_decoding_, step_speculating_, emitted,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  for (const auto& [id, reason] : finished) Finish(id, absl::OkStatus(), reason);
  return prefill_tokens;
}

EngineImpl::DraftOutcome EngineImpl::HandleSample(
    Sequence& seq, std::span<float> logits, std::span<const int32_t> drafts, absl::Time now,
    std::vector<std::pair<RequestId, FinishReason>>* finished) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  DraftOutcome outcome;
  for (size_t j = 0;; ++j) {
    bool accepted = false;
    const bool against_draft = j < drafts.size();
    const bool done = SampleOne(seq, logits.subspan(j * vocab, vocab),
                                against_draft ? drafts[j] : -1, now, &accepted, finished);
    outcome.compared += against_draft ? 1 : 0;
    outcome.accepted += accepted ? 1 : 0;
    if (done || !accepted) return outcome;
    // The draft's position was computed with the very token now in `tokens`.
    ++seq.num_computed;
  }
}

bool EngineImpl::SampleOne(Sequence& seq, std::span<float> logits, int32_t draft, absl::Time now,
                           bool* accepted,
                           std::vector<std::pair<RequestId, FinishReason>>* finished) {
  SampleInfo info;
  const int32_t token = draft >= 0 ? seq.sampler.SampleDraft(logits, seq.tokens, seq.prompt_len,
                                                             draft, &info, accepted)
                                   : seq.sampler.Sample(logits, seq.tokens, seq.prompt_len, &info);
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
  if (!out.finish.has_value()) return false;
  finished->emplace_back(seq.id, *out.finish);
  return true;
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
  found->DropDrafts();  // (none between steps; a session keeps verified tokens only)
  if (draft_source_ != nullptr) draft_source_->Forget(id);
  const absl::Time now = clock_->Now();
  const bool completed = reason == FinishReason::kStop || reason == FinishReason::kStopString ||
                         reason == FinishReason::kLength;
  bool committing = false;
  if (!found->session_id.empty()) {
    const SessionManager::Turn turn{{}, 0, found->session_version, found->lease_holder};
    committing = sessions_.EndTurn(found->session_id, turn, found->id, found->root,
                                   completed ? &found->tokens : nullptr, found->has_table,
                                   kv_.get(), [this, id](absl::Status commit) {
                                     std::lock_guard<std::mutex> lock(mu_);
                                     committed_.emplace_back(id, std::move(commit));
                                     cv_.notify_one();
                                   });
  }
  if (completed && found->has_table) Export(*found);
  std::unique_ptr<Sequence> seq = parked != nullptr ? std::move(parked) : scheduler_.Remove(id);
  if (!seq->admitted_once) ReleaseQueueSlot(*seq);

  Usage usage;
  usage.prompt_tokens = seq->prompt_len;
  usage.cached_tokens = seq->cached_tokens;
  usage.cached_tokens_remote = seq->cached_tokens_remote;
  usage.computed_tokens = seq->computed_prompt_tokens;
  usage.completion_tokens = std::max(0, seq->completion_tokens());
  usage.draft_tokens = seq->drafts_proposed;
  usage.draft_tokens_accepted = seq->drafts_accepted;
  usage.queue_time = seq->first_scheduled.value_or(now) - seq->submit_time;
  usage.time_to_first_token =
      seq->first_token.has_value() ? *seq->first_token - seq->submit_time : absl::ZeroDuration();
  usage.total_time = now - seq->submit_time;
  absl::Status final_status = status;
  if (reason == FinishReason::kDeadline)
    final_status = absl::DeadlineExceededError("request deadline passed");
  // Stats() reflects the released blocks before the sink hears of the finish.
  PublishStats(0.0);
  if (committing) {
    // The answer waits for the turn's record (OnCommitted).
    committing_.emplace(id, Committing{std::move(seq->sink), reason, usage});
    return;
  }
  seq->sink->OnFinish(final_status, reason, usage);
  ++requests_finished_total_;  // published with the next snapshot: after OnFinish returned
}

void EngineImpl::OnCommitted(RequestId id, const absl::Status& status) {
  auto it = committing_.find(id);
  if (it == committing_.end()) return;
  Committing c = std::move(it->second);
  committing_.erase(it);
  if (status.ok()) {
    c.sink->OnFinish(absl::OkStatus(), c.reason, c.usage);
  } else {
    c.sink->OnFinish(status, FinishReason::kError, c.usage);  // the turn was not recorded
  }
  ++requests_finished_total_;
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
        // The tier writes the fetched payloads straight into these blocks (held under
        // the request id until OnFetched finishes the import).
        // At most what the cap on blocks reserved by fetches in flight leaves.
        const int64_t cap = static_cast<int64_t>(options_.remote.max_import_fraction *
                                                 static_cast<double>(kv_->capacity_tokens() / bt));
        const int64_t room = cap - kv_->import_new_blocks();
        const int32_t count =
            static_cast<int32_t>(std::clamp<int64_t>(room, 0, full - job.local_blocks));
        job.destinations =
            kv_->ReserveImport(seq->id, seq->root, seq->tokens, job.chain, job.local_blocks, count);
        if (static_cast<int32_t>(job.destinations.size()) >= options_.remote.min_fetch_blocks) {
          fetching_.emplace(seq->id, std::move(seq));
          remote_tier_->Fetch(std::move(job));
          return;
        }
        kv_->FinishImport(seq->id, {}, 0);  // the pool has no blocks to spare for it
      }
    }
  }
  scheduler_.Add(std::move(seq));
}

void EngineImpl::OnFetched(RemoteTier::FetchResult result) {
  auto it = fetching_.find(result.id);
  if (it == fetching_.end()) {  // finished meanwhile (cancel, deadline, shutdown)
    kv_->FinishImport(result.id, {}, 0);
    return;
  }
  std::unique_ptr<Sequence> seq = std::move(it->second);
  fetching_.erase(it);
  // Links the blocks the tier wrote (no copy here) and frees the rest.
  const int32_t cached = kv_->FinishImport(seq->id, seq->tokens, result.written);
  if (result.written > 0) {
    if (cached > result.first) {
      seq->remote_from = result.first * kv_->block_tokens();
      seq->remote_to = cached * kv_->block_tokens();
    }
  }
  scheduler_.Add(std::move(seq));
}

void EngineImpl::Export(const Sequence& seq) {
  if (remote_tier_ == nullptr) return;
  RemoteTier::StoreJob job;
  job.key = ++next_export_key_;
  job.blocks = kv_->PinExport(job.key, seq.id, seq.tokens);
  if (job.blocks.empty()) {
    kv_->ReleaseExport(job.key);
    return;
  }
  job.partition = seq.root;
  job.tokens.assign(seq.tokens.begin(),
                    seq.tokens.begin() + job.blocks.size() * kv_->block_tokens());
  const uint64_t key = job.key;
  if (!remote_tier_->Store(std::move(job))) kv_->ReleaseExport(key);  // dropped, counted
}

void EngineImpl::FillSessionStats(EngineStats& s) const {
  s.open_sessions = sessions_.size();
  if (remote_tier_ == nullptr) return;
  s.remote = remote_tier_->stats();
  const SessionManager::Stats sessions = sessions_.stats();
  s.remote.sessions_restored_total = sessions.restored_total;
  s.remote.sessions_refreshed_total = sessions.refreshed_total;
  s.remote.session_commits_total = sessions.commits_total;
  s.remote.session_conflicts_total = sessions.conflicts_total;
  s.remote.errors_total += sessions.errors_total;
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
  s.speculative = speculative_;
  FillSessionStats(s);
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

namespace {
// Waits for a session call's answer (Engine's blocking forms).
template <typename T, typename Start>
T Await(Start start) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> answer = promise->get_future();
  start([promise](T value) { promise->set_value(std::move(value)); });
  return answer.get();
}
}  // namespace

absl::StatusOr<SessionInfo> Engine::OpenSession(absl::Duration ttl, const std::string& tenant) {
  return Await<absl::StatusOr<SessionInfo>>(
      [&](SessionCallback done) { OpenSessionAsync(ttl, tenant, std::move(done)); });
}
absl::StatusOr<SessionInfo> Engine::ForkSession(const std::string& parent_id, absl::Duration ttl,
                                                const std::string& tenant) {
  return Await<absl::StatusOr<SessionInfo>>(
      [&](SessionCallback done) { ForkSessionAsync(parent_id, ttl, tenant, std::move(done)); });
}
absl::Status Engine::CloseSession(const std::string& id, const std::string& tenant) {
  return Await<absl::Status>(
      [&](StatusCallback done) { CloseSessionAsync(id, tenant, std::move(done)); });
}
absl::StatusOr<SessionInfo> Engine::GetSession(const std::string& id, const std::string& tenant) {
  return Await<absl::StatusOr<SessionInfo>>(
      [&](SessionCallback done) { GetSessionAsync(id, tenant, std::move(done)); });
}

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
                                                     std::unique_ptr<backends::Backend> backend,
                                                     std::unique_ptr<DraftSource> draft_source) {
  absl::Status status = ValidateEngineOptions(options);
  if (!status.ok()) return status;
  if (backend == nullptr) return absl::InvalidArgumentError("backend must not be null");
  if (draft_source != nullptr && options.speculative.custom_source != nullptr) {
    return absl::InvalidArgumentError("a draft source and speculative.custom_source are both set");
  }
  if (options.speculative.source == "draft_model" && options.speculative.custom_source == nullptr &&
      draft_source == nullptr) {
    return absl::InvalidArgumentError(
        "speculative.source draft_model needs the loaded draft model (engine/model_loading.h "
        "loads it from draft_model_path)");
  }
  const model::KvLayout layout = options.KvLayoutFor(model.config());
  if (layout != backend->kv_layout()) {
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
  return std::unique_ptr<Engine>(new EngineImpl(options, model, std::move(backend), *std::move(kv),
                                                std::move(tok), std::move(draft_source)));
}

}  // namespace kvserve::engine
