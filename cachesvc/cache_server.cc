#include "cachesvc/cache_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/record_transport.h"
#include "server/drain_on_signal.h"
#include "server/grpc_bootstrap.h"
#include "server/host_port.h"

namespace kvserve::cachesvc {

absl::Status ValidateCacheServerOptions(const CacheServerOptions& o) {
  if (absl::StatusOr<server::HostPort> hp = server::ParseHostPort(o.listen_address, "listen");
      !hp.ok()) {
    return hp.status();
  }
  const SessionCacheService::Options& s = o.service;
  if (o.max_message_bytes < s.max_chunk_bytes + (64 << 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-message-bytes must be >= ", s.max_chunk_bytes + (64 << 10),
                     " (the largest chunk plus framing)"));
  }
  if (o.max_threads < 2) return absl::InvalidArgumentError("max-threads must be >= 2");
  if (s.max_chain_blocks < 1) return absl::InvalidArgumentError("max-chain-blocks must be >= 1");
  if (s.max_record_bytes < 1) return absl::InvalidArgumentError("max-record-bytes must be >= 1");
  if (s.max_session_tokens < 0) {
    return absl::InvalidArgumentError("max-session-tokens must be >= 0");
  }
  if (s.max_session_id_bytes < 1) {
    return absl::InvalidArgumentError("max-session-id-bytes must be >= 1");
  }
  if (s.default_session_ttl <= absl::ZeroDuration() || s.default_session_ttl > s.max_session_ttl) {
    return absl::InvalidArgumentError("session-ttl must be > 0 and <= max-session-ttl");
  }
  if (s.max_session_lease < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("max-session-lease must be >= 1ms");
  }
  if (s.session_tombstone_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("session-tombstone-ttl must be >= 1s");
  }
  if (s.injected_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("inject-delay must be >= 0");
  }
  if (o.drain_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("drain-grace must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CacheServer>> CacheServer::Start(
    CacheServerOptions options, std::unique_ptr<BlockStore> blocks,
    std::unique_ptr<SessionRecordStore> sessions, const common::Clock* clock) {
  if (absl::Status s = ValidateCacheServerOptions(options); !s.ok()) return s;
  std::unique_ptr<CacheServer> server(new CacheServer());
  server->options_ = std::move(options);
  server->blocks_ = std::move(blocks);
  server->sessions_ = std::move(sessions);
  absl::StatusOr<std::unique_ptr<SessionIndex>> index =
      SessionIndex::Create(server->sessions_.get(), server->blocks_.get(), clock->Now());
  if (!index.ok()) return index.status();
  server->index_ = *std::move(index);
  server->metrics_ = std::make_unique<CacheMetrics>();
  const server::BearerAuth* auth = server->options_.auth ? &*server->options_.auth : nullptr;
  server->service_ = std::make_unique<SessionCacheService>(
      server->options_.service, server->blocks_.get(), server->index_.get(), server->metrics_.get(),
      clock, auth);

  BlockStore* block_store = server->blocks_.get();
  SessionRecordStore* session_store = server->sessions_.get();
  server->metrics_->SetStateSource([block_store, session_store] {
    return CacheState{.blocks = block_store->stats(), .sessions = session_store->size()};
  });

  server::GrpcServerOptions grpc_options = {
      .listen_address = server->options_.listen_address,
      .credentials = server->options_.credentials,
      .max_receive_message_bytes = server->options_.max_message_bytes,
      .max_send_message_bytes = server->options_.max_message_bytes,
      .quota_name = "kvserve-cache",
      .memory_quota_bytes = server->options_.grpc_memory_quota_bytes,
      .max_threads = server->options_.max_threads,
      .readiness_service = kCacheReadinessService,
      .ready_at_start = true};
  for (const cache::TransportArg& arg : cache::kRecordTransportArgs)
    grpc_options.channel_args.emplace_back(arg.name, arg.value);
  absl::StatusOr<std::unique_ptr<server::ServingEndpoints>> endpoints =
      server::ServingEndpoints::Start(grpc_options, {server->service_.get()},
                                      server->options_.metrics, *server->metrics_);
  if (!endpoints.ok()) return endpoints.status();
  server->endpoints_ = *std::move(endpoints);
  return server;
}

void CacheServer::Shutdown(absl::Duration grace) { endpoints_->Stop(absl::Now() + grace); }

void CacheServer::RunUntilSignalled(const server::ShutdownSignals& signals) {
  server::DrainOnSignal(signals, {.program = "kvserve-cache",
                                  .grace = options_.drain_grace,
                                  .drain = [this](absl::Duration grace) {
                                    Shutdown(grace);
                                    return true;
                                  }});
}

CacheServer::~CacheServer() {
  // /metrics first (no scrape may read the stores below), then gRPC with no grace if
  // Shutdown() was not called.
  endpoints_.reset();
}

}  // namespace kvserve::cachesvc
