// The metadata key "kvserve-session-id": a conversation's session id where a router can
// read it without parsing the request body (HAProxy, Envoy and the client library hash
// on it to keep a session's turns on one replica).
//
// Contract of the Inference service:
// - A call that names a session in its body (GenerateRequest.session_id,
//   ForkSessionRequest.parent_session_id, CloseSession/GetSession's session_id) may carry
//   the key; when it does, every value must equal the body's id, else the call fails with
//   INVALID_ARGUMENT naming the key (a router and the server must never disagree on which
//   session a call is for). A call without the key is not checked.
// - OpenSession and ForkSession answer with the new session's id under the key in their
//   initial metadata.
//
// Header-only over a template `Metadata` (a multimap from key to values with data() and
// size(), such as grpc::ServerContextBase::client_metadata()), so it needs no gRPC.
#ifndef KVSERVE_SERVICE_SESSION_METADATA_H_
#define KVSERVE_SERVICE_SESSION_METADATA_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::service {

inline constexpr char kSessionIdMetadataKey[] = "kvserve-session-id";

// OK when `metadata` has no kvserve-session-id, or only values equal to `body_id`; else
// INVALID_ARGUMENT naming the key and the body's `field` (neither id is echoed: ids are
// secrets and may be long).
template <typename Metadata>
absl::Status CheckSessionMetadata(const Metadata& metadata, std::string_view body_id,
                                  std::string_view field) {
  auto [begin, end] = metadata.equal_range(kSessionIdMetadataKey);
  for (auto it = begin; it != end; ++it) {
    if (std::string_view(it->second.data(), it->second.size()) != body_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metadata ", kSessionIdMetadataKey, " does not match the request's ", std::string(field),
          body_id.empty() ? " (empty: a stateless request must not carry the key)" : ""));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_SESSION_METADATA_H_
