#include "service/server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/drain_on_signal.h"
#include "server/grpc_bootstrap.h"
#include "server/host_port.h"

namespace kvserve::service {
absl::Status ValidateHostPort(const std::string& address, const std::string& option_name) {
  return server::ParseHostPort(address, option_name).status();
}

absl::Status ValidateServerOptions(const ServerOptions& options) {
  if (absl::Status s = ValidateHostPort(options.listen_address, "listen"); !s.ok()) return s;
  if (!options.metrics.address.empty()) {
    if (absl::Status s = server::ValidateMetricsHttpOptions(options.metrics); !s.ok()) return s;
  }
  if (options.grpc_memory_quota_bytes < (int64_t{16} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("grpc-memory-quota-mib must be >= 16, got ",
                                                   options.grpc_memory_quota_bytes >> 20));
  }
  if (options.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-concurrent-streams must be >= 1, got ", options.max_concurrent_streams));
  }
  if (options.malloc_trim_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("malloc-trim-interval must be >= 0");
  }
  if (options.drain_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("drain-grace must be >= 0");
  }
  if (options.max_receive_message_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-message-bytes must be >= 1024, got ", options.max_receive_message_bytes));
  }
  const RequestLimits& limits = options.service.limits;
  if (limits.default_max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("default-max-tokens must be >= 1, got ", limits.default_max_tokens));
  }
  if (limits.max_prompt_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-prompt-bytes must be >= 1, got ", limits.max_prompt_bytes));
  }
  if (limits.max_session_id_bytes < 34) {  // the ids kvserve issues
    return absl::InvalidArgumentError(
        absl::StrCat("max-session-id-bytes must be >= 34, got ", limits.max_session_id_bytes));
  }
  if (options.service.retry_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry-after must be >= 0");
  }
  if (options.service.deadline_slack < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("deadline-slack must be >= 0");
  }
  if (options.http.has_value()) {
    if (absl::Status s = ValidateHttpApiOptions(*options.http); !s.ok()) return s;
  }
  if (!options.chat_template.empty() &&
      !model::ChatTemplateFamilyFromName(options.chat_template).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("chat-template: unknown family \"",
                                                   options.chat_template, "\" (one of ",
                                                   model::ChatTemplateFamilyNames(), ")"));
  }
  if (options.service.stream_flush_interval < absl::ZeroDuration() ||
      options.service.stream_flush_interval > absl::Seconds(1)) {
    return absl::InvalidArgumentError("stream-flush-interval must be in [0, 1s]");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (absl::Status s = ValidateServerOptions(options); !s.ok()) return s;
  std::unique_ptr<Server> server(new Server());
  server->options_ = std::move(options);
  server->metrics_ = std::make_unique<Metrics>();
  server->service_ =
      std::make_unique<InferenceService>(server->options_.service, server->metrics_.get());

  if (server->options_.malloc_trim_interval > absl::ZeroDuration()) {
    server->memory_trimmer_ =
        std::make_unique<server::MemoryTrimmer>(server->options_.malloc_trim_interval);
  }
  Server* raw = server.get();
  server->metrics_->SetEngineStatsSource([raw]() -> std::optional<engine::EngineStats> {
    std::lock_guard<std::mutex> lock(raw->mu_);
    if (raw->engine_ == nullptr) return std::nullopt;
    return raw->engine_->Stats();
  });
  absl::StatusOr<std::unique_ptr<server::ServingEndpoints>> endpoints =
      server::ServingEndpoints::Start(
          {.listen_address = server->options_.listen_address,
           .credentials = server->options_.credentials,
           .max_receive_message_bytes = server->options_.max_receive_message_bytes,
           .quota_name = "kvserve",
           .memory_quota_bytes = server->options_.grpc_memory_quota_bytes,
           .channel_args = {{GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             server->options_.max_concurrent_streams}},
           .readiness_service = kReadinessService,
           .ready_at_start = false},  // readiness: not loaded yet
          {server->service_.get()}, server->options_.metrics, *server->metrics_);
  if (!endpoints.ok()) return endpoints.status();
  server->endpoints_ = *std::move(endpoints);
  if (server->options_.http.has_value()) {
    absl::StatusOr<std::unique_ptr<HttpApi>> http =
        HttpApi::Start(*server->options_.http, server->service_.get(), server->metrics_.get());
    if (!http.ok()) return http.status();
    server->http_ = *std::move(http);
  }
  return server;
}

absl::Status Server::Attach(std::unique_ptr<model::Model> model,
                            std::unique_ptr<engine::Engine> engine, std::string backend_name) {
  if (model == nullptr || engine == nullptr) {
    return absl::InvalidArgumentError("Attach needs a model and an engine");
  }
  const int32_t max_tokens_limit = engine->submit_limits().max_tokens_limit;
  if (options_.service.limits.default_max_tokens > max_tokens_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("default-max-tokens (", options_.service.limits.default_max_tokens,
                     ") must be <= the engine's max-tokens-limit (", max_tokens_limit, ")"));
  }
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create(model->vocab());
  if (!tokenizer.ok()) return tokenizer.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (core_ != nullptr) return absl::FailedPreconditionError("a model is already attached");
  if (service_->draining()) {
    return absl::FailedPreconditionError("the server is draining");
  }
  model_ = std::move(model);
  tokenizer_ = *std::move(tokenizer);
  chat_ = std::make_unique<model::ChatPrompter>(
      *tokenizer_, options_.chat_template.empty()
                       ? std::nullopt
                       : model::ChatTemplateFamilyFromName(options_.chat_template));
  engine_ = std::move(engine);
  core_ = std::make_unique<ServingCore>();
  core_->model = model_.get();
  core_->tokenizer = tokenizer_.get();
  core_->chat = chat_.get();
  core_->engine = engine_.get();
  core_->backend_name = std::move(backend_name);
  service_->Attach(core_.get());
  endpoints_->SetReady(true);
  return absl::OkStatus();
}

engine::Engine* Server::engine() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_.get();
}

bool Server::Drain(absl::Duration grace) {
  std::lock_guard<std::mutex> drain_lock(drain_mu_);
  if (drain_started_) return drain_result_;
  drain_started_ = true;
  endpoints_->SetReady(false);
  service_->StartDraining();
  const bool idle = service_->WaitIdle(absl::Now() + grace);
  engine::Engine* engine = this->engine();
  // Cancels whatever is left; every sink gets OnFinish, so every call finishes.
  if (engine != nullptr) engine->Shutdown(absl::Now());
  // The HTTP answers the shutdown completed go out before the daemon stops.
  if (http_ != nullptr) http_->WaitAnswered(absl::Now() + absl::Seconds(1));
  endpoints_->Stop(absl::Now() + absl::Seconds(1));
  drain_result_ = idle;
  return idle;
}

bool Server::RunUntilSignalled(const server::ShutdownSignals& signals) {
  return server::DrainOnSignal(signals,
                               {.program = "kvserve",
                                .grace = options_.drain_grace,
                                .drain = [this](absl::Duration grace) { return Drain(grace); },
                                .end_grace = [this] { EndGrace(); }});
}

Server::~Server() {
  if (endpoints_ != nullptr) Drain(absl::ZeroDuration());
  // The HTTP API's workers stop (and join) before the model, tokenizer and engine they
  // serve from go.
  http_.reset();
  endpoints_.reset();  // /metrics first: no scrape may read the engine below
}

}  // namespace kvserve::service
