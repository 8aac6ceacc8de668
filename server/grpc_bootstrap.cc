#include "server/grpc_bootstrap.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"

namespace kvserve::server {

absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options,
                                           const std::vector<grpc::Service*>& services) {
  // gRPC's built-in grpc.health.v1.Health and server reflection. Both switches are
  // process-wide in gRPC (linking grpc++_reflection already registers reflection for
  // every server); every kvserve server wants them on, so repeating them is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  GrpcServer started;
  builder.AddListeningPort(
      options.listen_address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &started.port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  if (options.max_send_message_bytes >= 0) {
    builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  }
  for (const auto& [name, value] : options.channel_args) builder.AddChannelArgument(name, value);
  grpc::ResourceQuota quota(options.quota_name);
  quota.Resize(static_cast<size_t>(options.memory_quota_bytes));
  if (options.max_threads > 0) quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address,
                                               " (address in use or not local?)"));
  }
  grpc::HealthCheckServiceInterface* health = started.server->GetHealthCheckService();
  health->SetServingStatus("", true);  // liveness
  health->SetServingStatus(options.readiness_service, options.ready_at_start);
  return started;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsEndpoint(
    const MetricsHttpOptions& options, const MetricsSource& source) {
  if (options.address.empty()) return std::unique_ptr<MetricsHttpServer>();
  return MetricsHttpServer::Start(options, source);
}

absl::StatusOr<std::unique_ptr<ServingEndpoints>> ServingEndpoints::Start(
    const GrpcServerOptions& grpc_options, const std::vector<grpc::Service*>& services,
    const MetricsHttpOptions& metrics, const MetricsSource& source) {
  std::unique_ptr<ServingEndpoints> endpoints(new ServingEndpoints());
  absl::StatusOr<GrpcServer> grpc_server = StartGrpcServer(grpc_options, services);
  if (!grpc_server.ok()) return grpc_server.status();
  endpoints->grpc_ = *std::move(grpc_server);
  endpoints->readiness_service_ = grpc_options.readiness_service;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = StartMetricsEndpoint(metrics, source);
  if (!http.ok()) return http.status();  // the destructor stops the gRPC server
  endpoints->metrics_ = *std::move(http);
  return endpoints;
}

void ServingEndpoints::SetReady(bool ready) {
  grpc_.server->GetHealthCheckService()->SetServingStatus(readiness_service_, ready);
}

void ServingEndpoints::Stop(absl::Time deadline) {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  SetReady(false);
  grpc_.server->GetHealthCheckService()->Shutdown();
  grpc_.server->Shutdown(absl::ToChronoTime(deadline));
  grpc_.server->Wait();
}

ServingEndpoints::~ServingEndpoints() {
  metrics_.reset();
  if (grpc_.server != nullptr) Stop(absl::Now());
}

}  // namespace kvserve::server
