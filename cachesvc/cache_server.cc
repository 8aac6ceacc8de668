#include "cachesvc/cache_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/record_transport.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "service/host_port.h"

namespace kvserve::cachesvc {
namespace {

absl::Status ValidateOptions(const CacheServerOptions& o) {
  if (absl::StatusOr<service::HostPort> hp = service::ParseHostPort(o.listen_address, "listen");
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CacheServer>> CacheServer::Start(
    CacheServerOptions options, std::unique_ptr<BlockStore> blocks,
    std::unique_ptr<SessionRecordStore> sessions, const common::Clock* clock) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  std::unique_ptr<CacheServer> server(new CacheServer());
  server->options_ = std::move(options);
  server->blocks_ = std::move(blocks);
  server->sessions_ = std::move(sessions);
  absl::StatusOr<std::unique_ptr<SessionIndex>> index =
      SessionIndex::Create(server->sessions_.get(), server->blocks_.get(), clock->Now());
  if (!index.ok()) return index.status();
  server->index_ = *std::move(index);
  server->metrics_ = std::make_unique<CacheMetrics>();
  const common::BearerAuth* auth = server->options_.auth ? &*server->options_.auth : nullptr;
  server->service_ = std::make_unique<SessionCacheService>(
      server->options_.service, server->blocks_.get(), server->index_.get(), server->metrics_.get(),
      clock, auth);

  BlockStore* block_store = server->blocks_.get();
  SessionRecordStore* session_store = server->sessions_.get();
  server->metrics_->SetStateSource([block_store, session_store] {
    return CacheState{.blocks = block_store->stats(), .sessions = session_store->size()};
  });

  // Process-wide switches in gRPC; harmless to repeat (see service/server.cc).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(server->options_.listen_address,
                           server->options_.credentials != nullptr
                               ? server->options_.credentials
                               : grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(server->options_.max_message_bytes);
  builder.SetMaxSendMessageSize(server->options_.max_message_bytes);
  for (const cache::TransportArg& arg : cache::kRecordTransportArgs)
    builder.AddChannelArgument(arg.name, arg.value);
  grpc::ResourceQuota quota("kvserve-cache");
  quota.Resize(static_cast<size_t>(server->options_.grpc_memory_quota_bytes));
  quota.SetMaxThreads(server->options_.max_threads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(server->service_.get());
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", server->options_.listen_address,
                                               " (address in use or not local?)"));
  }
  server->port_ = port;
  grpc::HealthCheckServiceInterface* health = server->grpc_server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(kCacheReadinessService, true);

  if (!server->options_.metrics.address.empty()) {
    absl::StatusOr<std::unique_ptr<service::MetricsHttpServer>> http =
        service::MetricsHttpServer::Start(server->options_.metrics, *server->metrics_);
    if (!http.ok()) return http.status();  // ~CacheServer stops the gRPC server
    server->metrics_http_ = *std::move(http);
  }
  return server;
}

void CacheServer::Shutdown(absl::Duration grace) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  grpc_server_->GetHealthCheckService()->SetServingStatus(kCacheReadinessService, false);
  grpc_server_->GetHealthCheckService()->Shutdown();
  grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  grpc_server_->Wait();
}

CacheServer::~CacheServer() {
  if (grpc_server_ != nullptr) Shutdown(absl::ZeroDuration());
  metrics_http_.reset();  // no scrape may read the stores below
}

}  // namespace kvserve::cachesvc
