// The authentication flag kvserve and kvserve-cache share, defined once (auth_flags.cc):
//   --auth-tokens FILE   "TOKEN NAME" lines (server/bearer_auth.h); every call but health
//                        and reflection then needs "authorization: Bearer TOKEN"
// A binary that links kvserve_auth_flags takes it; mains call the function below after
// the flags are parsed.
#ifndef KVSERVE_SERVER_AUTH_FLAGS_H_
#define KVSERVE_SERVER_AUTH_FLAGS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "server/bearer_auth.h"

namespace kvserve::server {

// The tokens of --auth-tokens, or nullopt when the flag is empty (no authentication).
// INVALID_ARGUMENT "auth_tokens: ..." when the file cannot be read or is malformed (the
// message names the line).
absl::StatusOr<std::optional<BearerAuth>> BearerAuthFromFlag();

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_AUTH_FLAGS_H_
