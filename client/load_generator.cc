#include "client/load_generator.h"

#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvserve::client::bench {

absl::StatusOr<std::unique_ptr<LoadGenerator>> LoadGenerator::Create(const Client& client,
                                                                     LoadOptions options) {
  if (absl::Status s = ValidateWorkload(options.workload); !s.ok()) return s;
  if (options.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be >= 1");
  if (options.warmup < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (options.max_tokens_min < 0 || options.max_tokens_min > options.request.max_tokens()) {
    return absl::InvalidArgumentError("--max-tokens-min must be in [0, --max-tokens]");
  }
  if (options.cancel_after_tokens < 0) {
    return absl::InvalidArgumentError("--cancel-after-tokens must be >= 0");
  }
  if (options.pause_after_failure < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--pause-after-failure must be >= 0");
  }
  return std::unique_ptr<LoadGenerator>(new LoadGenerator(client, std::move(options)));
}

void LoadGenerator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  stop_cv_.notify_all();
}

bool LoadGenerator::WaitUntil(absl::Time until) {
  std::unique_lock<std::mutex> lock(mu_);
  if (until > absl::Now()) {
    stop_cv_.wait_until(lock, absl::ToChronoTime(until),
                        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopped_; });
  }
  return !stopped_;
}

void LoadGenerator::Ended(std::string_view method, const absl::Status& status,
                          const CallInfo& info) {
  if (absl::IsResourceExhausted(status) && (!info.retry_hint.has_value() || !info.retry_after)) {
    recorder_.AddMalformed("RESOURCE_EXHAUSTED without retry hint");
  }
  if (options_.on_call != nullptr) options_.on_call(method, status);
  if ((absl::IsUnavailable(status) || absl::IsResourceExhausted(status)) &&
      options_.pause_after_failure > absl::ZeroDuration()) {
    WaitUntil(absl::Now() + options_.pause_after_failure);
  }
}

absl::StatusCode LoadGenerator::Measure(const v1::GenerateRequest& request, int turn,
                                        const std::string* record_output_of) {
  RequestResult r;
  r.turn = turn;
  const absl::Time sent = absl::Now();
  absl::Time last_token = sent;
  std::optional<v1::Usage> usage;
  std::string text;
  std::unique_ptr<StreamCall> stream = streams_->Start(request);
  StreamPiece piece;
  while (stream->Next(&piece)) {
    ++r.messages;
    const int k = piece.tokens;
    if (k > 0) {
      const absl::Time now = absl::Now();
      if (r.ttft_s < 0) {
        // Tokens that came with the first one have no gap of their own to measure.
        r.ttft_s = absl::ToDoubleSeconds(now - sent);
      } else {
        const double gap = absl::ToDoubleSeconds(now - last_token) / k;
        for (int i = 0; i < k; ++i) r.itl_s.push_back(gap);
      }
      last_token = now;
      r.output_tokens += k;
    }
    if (record_output_of != nullptr) text += piece.text;
    if (piece.usage.has_value()) usage = std::move(piece.usage);
    if (options_.cancel_after_tokens > 0 && r.output_tokens >= options_.cancel_after_tokens) {
      stream->Cancel();
      break;
    }
  }
  const absl::Status status = stream->Finish();
  r.code = status.code();
  r.e2e_s = absl::ToDoubleSeconds(absl::Now() - sent);
  if (usage.has_value()) {
    r.prompt_tokens = usage->prompt_tokens();
    r.cached_tokens_local = usage->cached_tokens_local();
    r.cached_tokens_remote = usage->cached_tokens_remote();
    r.output_tokens = usage->completion_tokens();
    r.draft_tokens = usage->draft_tokens();
    r.draft_tokens_accepted = usage->draft_tokens_accepted();
  }
  if (status.ok() && !usage.has_value()) recorder_.AddMalformed("stream ended OK without usage");
  if (status.ok() && record_output_of != nullptr) {
    recorder_.AddOutput(*record_output_of, std::move(text));
  }
  recorder_.Add(std::move(r));
  Ended("GenerateStream", status, stream->info());
  return status.code();
}

v1::GenerateRequest LoadGenerator::RequestWithText(const std::string& text) const {
  v1::GenerateRequest request = options_.request;
  request.clear_prompt();
  if (options_.as_messages) {
    v1::Message* m = request.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(text);
  } else {
    request.set_text(text);
  }
  return request;
}

void LoadGenerator::RunUnit(const Unit& unit) {
  std::mt19937_64 rng(unit.seed);
  const bool single = options_.workload.shape == "single";
  std::string session_id;
  if (!single) {
    CallInfo info;
    absl::StatusOr<v1::Session> session = client_.OpenSession(absl::ZeroDuration(), &info);
    recorder_.AddSessionCall("OpenSession", session.status().code());
    Ended("OpenSession", session.status(), info);
    if (!session.ok()) return;
    session_id = session->session_id();
  }
  const bool greedy = options_.request.sampling().temperature() == 0.0f;
  const bool preset =
      single && options_.request.prompt_case() != v1::GenerateRequest::PROMPT_NOT_SET;
  for (int turn = 0; turn < unit.turns; ++turn) {
    const std::string text =
        preset ? options_.request.text() : TurnText(options_.workload, unit, turn);
    v1::GenerateRequest request = preset ? options_.request : RequestWithText(text);
    request.set_session_id(session_id);
    if (options_.max_tokens_min > 0) {
      request.set_max_tokens(std::uniform_int_distribution<int>(
          options_.max_tokens_min, options_.request.max_tokens())(rng));
    }
    const bool record = options_.record_outputs && greedy && turn == 0;
    if (Measure(request, turn, record ? &text : nullptr) != absl::StatusCode::kOk) break;
  }
  if (!session_id.empty()) {
    CallInfo info;
    const absl::Status closed = client_.CloseSession(session_id, &info);
    recorder_.AddSessionCall("CloseSession", closed.code());
    Ended("CloseSession", closed, info);
  }
}

absl::StatusOr<Report> LoadGenerator::Run() {
  for (int i = 0; i < options_.warmup; ++i) {
    const WorkloadOptions& w = options_.workload;
    std::unique_ptr<StreamCall> warm =
        streams_->Start(options_.request.prompt_case() != v1::GenerateRequest::PROMPT_NOT_SET
                            ? options_.request
                            : RequestWithText(w.prompts.empty() ? w.prompt : w.prompts.front()));
    StreamPiece discard;
    while (warm->Next(&discard)) {
    }
    if (absl::Status status = warm->Finish(); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("warm-up request: ", status.message()));
    }
  }
  const absl::Time start = absl::Now();
  UnitSource source(options_.workload, start);
  std::vector<std::thread> workers;
  for (int w = 0; w < options_.concurrency; ++w) {
    workers.emplace_back([&] {
      while (std::optional<Unit> unit = source.Take()) {
        if (!WaitUntil(unit->arrival)) break;
        RunUnit(*unit);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return Summarize(recorder_.Take(), absl::ToDoubleSeconds(absl::Now() - start));
}

absl::StatusOr<Report> RunLoad(const Client& client, LoadOptions options) {
  absl::StatusOr<std::unique_ptr<LoadGenerator>> load =
      LoadGenerator::Create(client, std::move(options));
  if (!load.ok()) return load.status();
  return (*load)->Run();
}

}  // namespace kvserve::client::bench
