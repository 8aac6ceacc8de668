#include "cachesvc/cache_server_run.h"

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/host_port.h"
#include "server/shutdown_signals.h"

namespace kvserve::cachesvc {

absl::Status RunCacheServer(CacheProcessOptions options) {
  if (absl::Status s = ValidateCacheServerOptions(options.server); !s.ok()) return s;
  absl::StatusOr<server::HostPort> listen =
      server::ParseHostPort(options.server.listen_address, "listen");
  if (!listen.ok()) return listen.status();
  const absl::Duration delay = options.server.service.injected_delay;
  if (delay > absl::ZeroDuration()) {
    std::printf("kvserve-cache: FAULT INJECTION: every call is delayed by %s (--inject-delay)\n",
                absl::FormatDuration(delay).c_str());
  }
  absl::StatusOr<CacheStores> stores =
      OpenCacheStores(options.storage, common::Clock::Real()->Now());
  if (!stores.ok()) return stores.status();
  if (!stores->restored.empty()) std::printf("kvserve-cache: %s\n", stores->restored.c_str());

  absl::StatusOr<server::ShutdownSignals> signals = server::ShutdownSignals::Install();
  if (!signals.ok()) return signals.status();
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(std::move(options.server), std::move(stores->blocks),
                         std::move(stores->sessions), common::Clock::Real());
  if (!server.ok()) return server.status();
  const std::string host = listen->host.find(':') == std::string::npos
                               ? listen->host
                               : absl::StrCat("[", listen->host, "]");
  std::printf("kvserve-cache listening on %s:%d (backend %s", host.c_str(), (*server)->port(),
              (*server)->blocks().name().c_str());
  if ((*server)->metrics_port() != 0) std::printf(", metrics port %d", (*server)->metrics_port());
  std::printf(")\n");
  std::fflush(stdout);
  (*server)->RunUntilSignalled(*signals);
  return absl::OkStatus();
}

}  // namespace kvserve::cachesvc
