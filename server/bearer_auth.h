// Bearer-token authentication of gRPC calls (kvserve-cache, kvserve): the tokens come from a file
// of "TOKEN NAME" lines; a call is authenticated when its "authorization" metadata is "Bearer
// TOKEN" for a listed token.
//
// Token file format: one "TOKEN NAME" a line (separated by spaces or tabs, both
// non-empty, nothing after NAME); '#' starts a comment line; blank lines are ignored.
//
// Threading: immutable after construction; every method is thread-safe.
#ifndef KVSERVE_SERVER_BEARER_AUTH_H_
#define KVSERVE_SERVER_BEARER_AUTH_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::server {

class BearerAuth {
 public:
  // INVALID_ARGUMENT naming the line ("line 3: ...") for a malformed line, or when no
  // token is listed.
  static absl::StatusOr<BearerAuth> Parse(std::string_view text);
  // Parse of the file's contents; NOT_FOUND / PERMISSION_DENIED when unreadable.
  static absl::StatusOr<BearerAuth> FromFile(const std::string& path);

  // The name of the token in `authorization` ("Bearer TOKEN"), or nullopt. Compares
  // against every listed token in time independent of where they differ.
  std::optional<std::string> Authenticate(std::string_view authorization) const;
  // The name of the token a call carries in its "authorization" metadata, or
  // UNAUTHENTICATED (the same message for a missing, malformed or unknown token).
  // `Metadata` is a multimap from key to value whose values have data() and size(), such
  // as grpc::ServerContextBase::client_metadata() (a template, so that this file does
  // not depend on gRPC).
  template <typename Metadata>
  absl::StatusOr<std::string> AuthenticateCall(const Metadata& metadata) const {
    auto it = metadata.find(kAuthorizationKey);
    if (it == metadata.end()) return AuthenticateHeader(std::nullopt);
    return AuthenticateHeader(std::string_view(it->second.data(), it->second.size()));
  }
  // The name of the token in an "authorization" header or metadata value (nullopt: none
  // was sent), or UNAUTHENTICATED as AuthenticateCall.
  absl::StatusOr<std::string> AuthenticateHeader(
      std::optional<std::string_view> authorization) const {
    std::optional<std::string> name;
    if (authorization.has_value()) name = Authenticate(*authorization);
    if (!name.has_value()) {
      return absl::UnauthenticatedError(
          "missing or unknown bearer token (authorization: Bearer TOKEN)");
    }
    return *std::move(name);
  }
  // The metadata key that carries the token.
  static constexpr char kAuthorizationKey[] = "authorization";

  // The first listed token (what a client sends).
  const std::string& first_token() const { return entries_.front().token; }

 private:
  struct Entry {
    std::string token;
    std::string name;
  };
  std::vector<Entry> entries_;
};

// Reads the first token of a token file (for clients: the same file format, first
// entry). INVALID_ARGUMENT / NOT_FOUND as FromFile.
absl::StatusOr<std::string> FirstTokenOfFile(const std::string& path);

// The token a client sends, read from the first line of `path` (surrounding whitespace
// stripped; the rest of the file is ignored): kvserve's --session-cache-token-file.
// INVALID_ARGUMENT "cannot read PATH" or "PATH has no token on its first line".
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_BEARER_AUTH_H_
