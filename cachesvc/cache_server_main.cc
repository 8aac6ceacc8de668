// kvserve-cache: the session cache service (kvserve.v1.SessionCache). Its flags
// (cache_server_flags.cc, server/tls_flags.cc, server/auth_flags.cc) map onto
// CacheProcessOptions; RunCacheServer (cache_server_run.h) opens the stores, serves, prints
// "kvserve-cache listening on HOST:PORT", and on SIGTERM or SIGINT stops: readiness goes
// NOT_SERVING, calls in flight get --drain-grace, then the process exits 0.

#include <string>

#include "absl/strings/str_cat.h"
#include "cachesvc/cache_server_flags.h"
#include "cachesvc/cache_server_run.h"
#include "common/build_version.h"
#include "common/flags.h"
#include "common/heap_tuning.h"

namespace {

constexpr char kUsage[] =
    "The session cache service (kvserve.v1.SessionCache): KV blocks and session records "
    "shared by kvserve replicas, with health, reflection and Prometheus metrics.\n"
    "Usage: kvserve-cache [--listen 127.0.0.1:50061] [--memory-bytes N] "
    "[--auth-tokens FILE] [--metrics-listen HOST:PORT] [--tls-cert FILE --tls-key FILE "
    "[--tls-client-ca FILE]] [flags]\n"
    "Flags accept - or _ (--memory-bytes or --memory_bytes). SIGTERM stops and exits 0.";

std::string Version() {
  return absl::StrCat("kvserve-cache ", kvserve::common::kVersion,
                      "\ncommit: ", kvserve::common::kGitCommit,
                      "\nbackend: none (stores KV blocks and sessions; runs no model, no BLAS)\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Block records of ~1 MB are received and sent all the time: keep them out of page faults.
  kvserve::common::TuneHeapForLargeBuffers();
  return kvserve::common::RunFlagsOnlyMain(
      argc, argv, "kvserve-cache", kUsage, "cache_server_main.cc", Version, [] {
        absl::StatusOr<kvserve::cachesvc::CacheProcessOptions> options =
            kvserve::cachesvc::CacheProcessOptionsFromFlags();
        if (!options.ok()) return options.status();
        return kvserve::cachesvc::RunCacheServer(*std::move(options));
      });
}
