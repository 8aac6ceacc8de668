// kvserve-cache's flags (cache_server_flags.cc; with the shared server/tls_flags and
// server/auth_flags) and how they map onto its options. Linked into kvserve-cache only.
#ifndef KVSERVE_CACHESVC_CACHE_SERVER_FLAGS_H_
#define KVSERVE_CACHESVC_CACHE_SERVER_FLAGS_H_

#include "absl/status/statusor.h"
#include "cachesvc/cache_server_run.h"

namespace kvserve::cachesvc {

// The options the parsed flags say. Reads the files the flags name (--auth-tokens,
// --tls-*, --metrics-tls-*): INVALID_ARGUMENT naming the flag when one does not load.
// Values are checked by RunCacheServer, not here.
absl::StatusOr<CacheProcessOptions> CacheProcessOptionsFromFlags();

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_CACHE_SERVER_FLAGS_H_
