#include "server/auth_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, auth_tokens, "",
          "File of \"TOKEN NAME\" lines ('#' comments); every call but health and reflection "
          "then needs \"authorization: Bearer TOKEN\" with a listed token (else "
          "UNAUTHENTICATED). kvserve: NAME is the caller's tenant; sessions belong to their "
          "tenant and KV is shared only within a tenant. Empty = no authentication.");

namespace kvserve::server {

absl::StatusOr<std::optional<BearerAuth>> BearerAuthFromFlag() {
  const std::string path = absl::GetFlag(FLAGS_auth_tokens);
  if (path.empty()) return std::nullopt;
  absl::StatusOr<BearerAuth> auth = BearerAuth::FromFile(path);
  if (!auth.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("auth_tokens: ", auth.status().message()));
  }
  return std::optional<BearerAuth>(*std::move(auth));
}

}  // namespace kvserve::server
