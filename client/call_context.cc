#include "client/call_context.h"

#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())),
                      status.error_message());
}

void PrepareContext(grpc::ClientContext* context, absl::Time deadline,
                    const std::string& bearer_token, std::string_view session_id) {
  context->set_deadline(absl::ToChronoTime(deadline));
  if (!bearer_token.empty())
    context->AddMetadata("authorization", absl::StrCat("Bearer ", bearer_token));
  if (!session_id.empty()) context->AddMetadata(kSessionIdMetadataKey, std::string(session_id));
}

std::optional<absl::Duration> RetryHint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find("grpc-retry-pushback-ms");
  if (it == trailers.end()) return std::nullopt;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms) || ms < 0) {
    return std::nullopt;
  }
  return absl::Milliseconds(ms);
}

bool HasRetryAfter(const grpc::ClientContext& context) {
  return context.GetServerTrailingMetadata().count("retry-after") > 0;
}

std::string InitialMetadata(const grpc::ClientContext& context, std::string_view key) {
  const auto& initial = context.GetServerInitialMetadata();
  auto it = initial.find(grpc::string_ref(key.data(), key.size()));
  if (it == initial.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Each replica gets its own connection even when two targets resolve alike.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(
      target, credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials(),
      args);
}

}  // namespace kvserve::client
