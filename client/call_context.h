// What every call of the client puts on the wire and reads back besides its message:
// deadline, bearer token, session id metadata, the server's retry hint, and the status.
#ifndef KVSERVE_CLIENT_CALL_CONTEXT_H_
#define KVSERVE_CLIENT_CALL_CONTEXT_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace kvserve::client {

// The metadata key carrying a call's session id (see service/session_metadata.h: the
// server checks it against the body; OpenSession/ForkSession answer with it).
inline constexpr char kSessionIdMetadataKey[] = "kvserve-session-id";

// How a call went: the replica that answered it last, how many attempts it took, and
// the retry hints on the last attempt's trailers (set when it failed).
struct CallInfo {
  std::string replica;  // the target of the last attempt
  int attempts = 0;
  std::optional<absl::Duration> retry_hint;  // "grpc-retry-pushback-ms" (see RetryHint)
  bool retry_after = false;                  // a "retry-after" trailer was sent
};

// grpc::Status -> absl::Status (the codes are the same numbers; the message is kept).
absl::Status FromGrpcStatus(const grpc::Status& status);

// Sets `context`'s deadline, "authorization: Bearer TOKEN" when `bearer_token` is not
// empty, and kvserve-session-id when `session_id` is not empty.
void PrepareContext(grpc::ClientContext* context, absl::Time deadline,
                    const std::string& bearer_token, std::string_view session_id);

// The server's retry hint of a finished call: trailing metadata "grpc-retry-pushback-ms"
// (a non-negative integer; kvserve sends it with RESOURCE_EXHAUSTED and UNAVAILABLE), or
// nullopt when absent or malformed.
std::optional<absl::Duration> RetryHint(const grpc::ClientContext& context);

// Whether a finished call's trailing metadata has "retry-after" (the HTTP-style hint
// kvserve sends beside grpc-retry-pushback-ms).
bool HasRetryAfter(const grpc::ClientContext& context);

// The value of `key` in `context`'s initial metadata from the server ("" when absent).
std::string InitialMetadata(const grpc::ClientContext& context, std::string_view key);

// A channel to `target` (TLS when `credentials` say so; null = plaintext) that accepts
// messages up to 64 MiB.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials);

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_CALL_CONTEXT_H_
