// kvserve-cache's process, once its flags are mapped: open the stores, start the server,
// serve until SIGTERM/SIGINT, stop (cachesvc/cache_server_main.cc calls it).
#ifndef KVSERVE_CACHESVC_CACHE_SERVER_RUN_H_
#define KVSERVE_CACHESVC_CACHE_SERVER_RUN_H_

#include "absl/status/status.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/cache_server_stores.h"

namespace kvserve::cachesvc {

struct CacheProcessOptions {
  CacheServerOptions server;
  CacheStorageOptions storage;
};

// Checks the options (ValidateCacheServerOptions, ValidateCacheStorageOptions), opens the
// stores (OpenCacheStores at the wall clock's now), installs the shutdown signals, starts
// the CacheServer and prints "kvserve-cache listening on HOST:PORT (backend NAME[, metrics
// port N])" on stdout; then serves until SIGTERM or SIGINT (CacheServer::RunUntilSignalled)
// and returns OK. INVALID_ARGUMENT naming the option (by its flag's name) for bad
// options; the stores' and CacheServer::Start's errors.
absl::Status RunCacheServer(CacheProcessOptions options);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_CACHE_SERVER_RUN_H_
