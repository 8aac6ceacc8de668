#include "service/server_run.h"

#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/remote_cache_client.h"
#include "server/bearer_auth.h"
#include "server/process_metrics.h"
#include "server/shutdown_signals.h"
#include "server/tls_credentials.h"

namespace kvserve::service {
namespace {

// The client of options.target (null when it is empty).
absl::StatusOr<std::unique_ptr<cache::RemoteCacheClient>> ConnectSessionCache(
    const SessionCacheOptions& options) {
  if (options.target.empty()) return nullptr;
  cache::RemoteCacheClient::Options client;
  client.target = options.target;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      server::MakeChannelCredentials({.ca_file = options.tls_ca_file,
                                      .cert_file = options.tls_cert_file,
                                      .key_file = options.tls_key_file,
                                      .refresh_interval = options.tls_refresh_interval});
  if (!credentials.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session-cache-tls-*: ", credentials.status().message()));
  }
  client.credentials = *std::move(credentials);
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = server::ReadTokenFile(options.token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("session_cache_token_file: ", token.status().message()));
    }
    client.token = *std::move(token);
  }
  return cache::RemoteCacheClient::Create(client);
}

void Say(const std::string& line) {
  std::printf("kvserve: %s\n", line.c_str());
  std::fflush(stdout);
}

// "KV pool 512 MiB (26214 blocks of 20 KiB, 1280 bytes a token), resident from start;
// resident memory now 538 MiB": the figure to size a memory limit from.
std::string DescribeMemory(Server& server, const engine::ModelOptions& options,
                           const model::KvLayout& layout) {
  const engine::EngineStats stats = server.engine()->Stats();
  const double pool_mib = static_cast<double>(stats.blocks_total) *
                          static_cast<double>(layout.block_bytes()) / (1 << 20);
  absl::StatusOr<server::ProcessSample> sample = server::ReadProcessSample({});
  const double resident = sample.ok() ? sample->resident_memory_bytes : 0;
  char line[256];
  std::snprintf(line, sizeof line,
                "KV pool %.0f MiB (%lld blocks of %zu KiB, %zu bytes a token)%s; resident memory "
                "now %.0f MiB",
                pool_mib, static_cast<long long>(stats.blocks_total), layout.block_bytes() >> 10,
                layout.token_bytes(),
                options.engine.kv_prefault ? ", resident from start" : ", touched as used",
                resident / (1 << 20));
  return line;
}

// Idle HTTP connections each hold a descriptor: the soft open-file limit (often 1024)
// goes up to the hard one, so --http-max-connections is what bounds them.
void RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

absl::Status ValidateProcessOptions(const ProcessOptions& options) {
  if (absl::Status s = ValidateServerOptions(options.server); !s.ok()) return s;
  if (absl::Status s = engine::ValidateModelOptions(options.model); !s.ok()) return s;
  const SessionCacheOptions& cache = options.session_cache;
  if (cache.target.empty() &&
      !(cache.tls_ca_file.empty() && cache.tls_cert_file.empty() && cache.tls_key_file.empty())) {
    return absl::InvalidArgumentError("--session-cache-tls-* need --session-cache");
  }
  return absl::OkStatus();
}

absl::Status RunProcess(ProcessOptions options, const backends::RuntimeInfo& runtime) {
  if (absl::Status s = ValidateProcessOptions(options); !s.ok()) return s;
  // Declared before the server: the engine uses it until the server is gone.
  absl::StatusOr<std::unique_ptr<cache::RemoteCacheClient>> session_cache =
      ConnectSessionCache(options.session_cache);
  if (!session_cache.ok()) return session_cache.status();
  engine::ModelOptions& model_options = options.model;
  model_options.engine.remote_cache = session_cache->get();
  model_options.engine.remote.owner = options.server.listen_address;

  if (options.server.http.has_value()) RaiseOpenFileLimit();
  // From here on SIGTERM/SIGINT drain (also when they arrive while the model loads).
  absl::StatusOr<server::ShutdownSignals> signals = server::ShutdownSignals::Install();
  if (!signals.ok()) return signals.status();
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options.server);
  if (!server.ok()) return server.status();
  (*server)->metrics().SetBuildInfo(runtime);
  Say(absl::StrCat("listening on ", options.server.listen_address, " (port ", (*server)->port(),
                   "), metrics on ", options.server.metrics.address, " (port ",
                   (*server)->metrics_port(), "), ",
                   options.server.http.has_value()
                       ? absl::StrCat("http on ", options.server.http->daemon.address, " (port ",
                                      (*server)->http_port(), ")")
                       : std::string("http off"),
                   "; loading ", model_options.model_path));

  // "loading PATH: ..." so that the message never starts with a flag's name (a model
  // file's fault is not the flag's; RunFlagsOnlyMain would put "--" before it).
  absl::StatusOr<engine::LoadedModel> loaded = engine::LoadModel(model_options);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), absl::StrCat("loading ", model_options.model_path,
                                                             ": ", loaded.status().message()));
  }
  const model::KvLayout layout = model_options.engine.KvLayoutFor(loaded->model->config());
  if (absl::Status s =
          (*server)->Attach(std::move(loaded->model), std::move(loaded->engine), loaded->backend);
      !s.ok()) {
    return s;
  }
  Say(DescribeMemory(**server, model_options, layout));
  const bool bf16_auto = model_options.bf16_panel_kernel == "auto";
  if (model_options.backend == "cpu_blas" && bf16_auto && !runtime.bf16_panel_reason.empty()) {
    Say(runtime.bf16_panel_reason);
  }
  Say(absl::StrCat(
      "ready (backend ", model_options.backend, ", kernel level ", runtime.kernel_level,
      model_options.backend != "cpu_blas" || runtime.bf16_panel_kernel.empty()
          ? std::string()
          : absl::StrCat(", bf16 panel kernel ",
                         bf16_auto ? runtime.bf16_panel_kernel : model_options.bf16_panel_kernel),
      ", BLAS core ", runtime.blas_core,
      model_options.draft_model_path.empty()
          ? std::string()
          : absl::StrCat(", draft model ", model_options.draft_model_path),
      *session_cache != nullptr ? ", session cache " : "", options.session_cache.target, ")"));
  (*server)->RunUntilSignalled(*signals);
  return absl::OkStatus();
}

}  // namespace kvserve::service
