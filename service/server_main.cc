// kvserve: the gRPC inference server. Maps flags onto ServerOptions / ModelOptions,
// starts the server (liveness at once, readiness once the model is loaded), and drains
// on SIGTERM or SIGINT: new work gets UNAVAILABLE, in-flight requests get up to
// --drain-grace, then the process exits 0. A second signal during the drain ends the
// grace period at once (what is still running is cancelled).

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backends/cpu_blas/blas_startup.h"
#include "backends/runtime_info.h"
#include "cache/remote_cache_client.h"
#include "common/flags.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "model/dtype.h"
#include "server/bearer_auth.h"
#include "server/shutdown_signals.h"
#include "server/tls_credentials.h"
#include "server/tls_flags.h"
#include "service/server.h"

ABSL_FLAG(std::string, model, "",
          "Model file: GGUF, or a llama2.c checkpoint with --tokenizer. Required.");
ABSL_FLAG(std::string, tokenizer, "", "llama2.c tokenizer.bin (only for llama2.c checkpoints).");
ABSL_FLAG(bool, weights_huge_pages, true,
          "Read the model file into memory backed by transparent huge pages (private, "
          "resident; decode streams the weights faster) instead of mapping it (shared with "
          "the page cache, droppable under memory pressure).");
ABSL_FLAG(bool, f32_panels, true,
          "On CPUs with AVX-512 (cpu_blas kernel level avx512 and up), repack f32 projection "
          "matrices into 16-row panels at load (batched decode and prefill read each weight "
          "once per 8 activation rows; the weights stay resident once).");
ABSL_FLAG(bool, bf16_panels, true,
          "On CPUs with AVX512-BF16 (cpu_blas kernel level avx512bf16), repack bf16 "
          "projection matrices into 16-row panels at load (batched decode reads each "
          "weight once per step; the weights stay resident once).");
ABSL_FLAG(bool, quant_panels, true,
          "On CPUs with AVX-512 VNNI (cpu_blas kernel level avx512vnni and up), repack q4_0, "
          "q8_0, q4_K and q6_K projection matrices into 16-row panels at load (the same bytes "
          "regrouped: batched "
          "decode and prefill read each weight once per 8 rows, without per-step decoding).");
ABSL_FLAG(bool, batch_invariant, true,
          "Compute every K/V row and logit row with the same arithmetic whatever the batch, "
          "the prefill chunking or where a session's history came from (this replica's "
          "cache, kvserve-cache, recomputed), so a request's tokens do not depend on cache "
          "state. false lets cpu_blas prefill through OpenBLAS sgemm (faster on some CPUs, "
          "rounds differently; docs/performance.md, Cache-state invariance).");
ABSL_FLAG(std::string, backend, "cpu_blas", "Compute backend: cpu_blas or reference.");
ABSL_FLAG(int32_t, threads, 0, "Backend worker threads; 0 = all cores.");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address HOST:PORT (port 0 = any free port; 0.0.0.0 for all interfaces).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address HOST:PORT; empty = no metrics endpoint.");
ABSL_FLAG(int64_t, kv_budget_mib, 512, "KV cache memory (block pool) in MiB.");
ABSL_FLAG(int32_t, kv_block_tokens, 16, "KV block size in token positions.");
ABSL_FLAG(bool, kv_prefault, true,
          "Make the whole KV pool resident at start, so the process's resident size is known "
          "then (printed at start; set memory limits from it) instead of growing as the pool is "
          "first touched.");
ABSL_FLAG(std::string, kv_dtype, "f32", "Element type of cached K/V: f32 or f16.");
ABSL_FLAG(int32_t, max_running, 64, "Batching: sequences decoding or prefilling at once.");
ABSL_FLAG(int32_t, max_step_tokens, 512,
          "Batching: tokens per engine step over all sequences (chunked prefill budget).");
ABSL_FLAG(int32_t, max_waiting, 1024,
          "Queue: requests waiting to run; beyond it requests get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_waiting_prompt_tokens, int64_t{1} << 20,
          "Queue: prompt tokens of the waiting requests; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_sessions, 4096, "Sessions: open sessions; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_sessions_per_tenant, 1024,
          "Sessions: open sessions of one tenant (with --auth-tokens); beyond it "
          "RESOURCE_EXHAUSTED. 0 = no per-tenant limit.");
ABSL_FLAG(int32_t, max_session_tokens, 0,
          "Sessions: tokens a session's history may hold; 0 = the model's context length.");
ABSL_FLAG(absl::Duration, session_ttl, absl::Minutes(10),
          "Sessions: idle time-to-live when OpenSession leaves ttl unset.");
ABSL_FLAG(absl::Duration, max_session_ttl, absl::Hours(24), "Sessions: largest accepted ttl.");
ABSL_FLAG(int32_t, max_tokens_limit, 4096, "Largest accepted GenerateRequest.max_tokens.");
ABSL_FLAG(int32_t, max_stop_strings, 16,
          "Largest number of stop strings a request may carry (more: INVALID_ARGUMENT).");
ABSL_FLAG(int32_t, max_stop_string_bytes, 256, "Longest accepted stop string, in bytes.");
ABSL_FLAG(int32_t, max_stop_token_ids, 64,
          "Largest number of stop token ids a request may carry (more: INVALID_ARGUMENT).");
ABSL_FLAG(int32_t, max_cache_salt_bytes, 256, "Longest accepted cache_salt, in bytes.");
ABSL_FLAG(int32_t, default_max_tokens, 256, "max_tokens of a request that leaves it unset.");
ABSL_FLAG(int64_t, max_prompt_bytes, 1 << 20,
          "Largest accepted text prompt (or chat messages' contents together), in bytes.");
ABSL_FLAG(int32_t, max_chat_messages, 1024, "Most messages a GenerateRequest.messages may hold.");
ABSL_FLAG(int32_t, max_session_id_bytes, 128,
          "Longest accepted session id, in bytes (kvserve issues 34-byte ids).");
ABSL_FLAG(int32_t, max_message_bytes, 4 << 20,
          "Largest accepted request message, in bytes (larger: RESOURCE_EXHAUSTED).");
ABSL_FLAG(int64_t, grpc_memory_quota_mib, 256,
          "Memory gRPC may use for connections and calls, in MiB; under pressure it refuses "
          "new streams instead of growing.");
ABSL_FLAG(int32_t, max_concurrent_streams, 256,
          "Calls open at once on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS).");
ABSL_FLAG(absl::Duration, malloc_trim_interval, absl::Seconds(2),
          "How often freed heap memory is returned to the OS (malloc_trim); 0 = never.");
ABSL_FLAG(int32_t, metrics_threads, 2, "Worker threads of the /metrics endpoint.");
ABSL_FLAG(absl::Duration, metrics_timeout, absl::Seconds(10),
          "/metrics: a connection idle or stalled this long is closed (whole seconds).");
ABSL_FLAG(int32_t, metrics_max_connections, 256,
          "/metrics: open connections at once; more are refused.");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(30),
          "On SIGTERM: how long in-flight requests may run before they are cancelled.");
ABSL_FLAG(absl::Duration, deadline_slack, absl::Milliseconds(250),
          "A generation cancelled less than this before its deadline counts as expired "
          "(DEADLINE_EXCEEDED): its client's deadline timer fired.");
ABSL_FLAG(absl::Duration, stream_flush_interval, absl::Milliseconds(1),
          "GenerateStream: least time between two messages of a stream; tokens produced "
          "meanwhile go out together (the first token never waits). 0 = one message per "
          "token when the client keeps up.");
ABSL_FLAG(absl::Duration, retry_after, absl::Seconds(1),
          "Retry hint sent with RESOURCE_EXHAUSTED and UNAVAILABLE answers.");
ABSL_FLAG(std::string, session_cache, "",
          "Session cache service (kvserve-cache) HOST:PORT to fetch KV and session records "
          "from and write them to; empty = none.");
ABSL_FLAG(absl::Duration, session_cache_timeout, absl::Seconds(2),
          "Session cache: deadline of each call; a slower or failed call is a miss and the "
          "request recomputes.");
ABSL_FLAG(std::string, session_cache_token_file, "",
          "Session cache: file holding the bearer token to send (first line); empty = none.");
ABSL_FLAG(std::string, session_cache_tls_ca, "",
          "Session cache: PEM CA file kvserve-cache's certificate must chain to (TLS); "
          "empty = plaintext.");
ABSL_FLAG(std::string, session_cache_tls_cert, "",
          "Session cache: PEM client certificate for a mutual-TLS kvserve-cache (with "
          "--session-cache-tls-key and --session-cache-tls-ca).");
ABSL_FLAG(std::string, session_cache_tls_key, "",
          "Session cache: PEM key of --session-cache-tls-cert (unencrypted).");
ABSL_FLAG(int32_t, session_cache_max_pending_stores, 64,
          "Session cache: finished requests whose blocks wait to be written behind; more "
          "are dropped and counted.");
ABSL_FLAG(absl::Duration, session_lease, absl::Seconds(30),
          "Session cache: how long a turn's lease on its session lasts unless renewed (it is "
          "renewed while the turn runs); a replica that dies mid-turn locks the session for at "
          "most this long. At most kvserve-cache's --max-session-lease (default 10m).");
ABSL_FLAG(std::string, auth_tokens, "",
          "File of \"TOKEN TENANT\" lines ('#' comments); every kvserve.v1.Inference call then "
          "needs \"authorization: Bearer TOKEN\" with a listed token (else UNAUTHENTICATED), "
          "sessions belong to their tenant and KV is shared only within a tenant. Health and "
          "reflection stay open. Empty = no authentication.");
ABSL_FLAG(bool, blas_reexec, true, kvserve::backends::cpu_blas::kBlasReexecFlagHelp);
ABSL_FLAG(uint64_t, seed, 0,
          "Seeds the sampling of requests without a seed (session ids never depend on it).");

namespace kvserve::service {
namespace {

// The process's resident set size (/proc/self/statm), 0 if unreadable.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0;
  int64_t resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * sysconf(_SC_PAGESIZE);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvserve: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::Status CheckFlags() {
  if (absl::GetFlag(FLAGS_model).empty()) {
    return absl::InvalidArgumentError("--model is required (see --help)");
  }
  if (absl::GetFlag(FLAGS_threads) < 0) {
    return absl::InvalidArgumentError("--threads must be >= 0 (0 = all cores)");
  }
  if (absl::GetFlag(FLAGS_kv_budget_mib) < 1 ||
      absl::GetFlag(FLAGS_kv_budget_mib) > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError("--kv_budget_mib must be in [1, 16777216]");
  }
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "cpu_blas" && backend != "reference") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be cpu_blas or reference, got \"", backend, "\""));
  }
  struct Positive {
    const char* name;
    int64_t value;
  };
  for (const Positive& p : std::vector<Positive>{
           {"--kv_block_tokens", absl::GetFlag(FLAGS_kv_block_tokens)},
           {"--max_running", absl::GetFlag(FLAGS_max_running)},
           {"--max_step_tokens", absl::GetFlag(FLAGS_max_step_tokens)},
           {"--max_waiting", absl::GetFlag(FLAGS_max_waiting)},
           {"--max_waiting_prompt_tokens", absl::GetFlag(FLAGS_max_waiting_prompt_tokens)},
           {"--max_sessions", absl::GetFlag(FLAGS_max_sessions)}}) {
    if (p.value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(p.name, " must be >= 1, got ", p.value));
    }
  }
  if (absl::GetFlag(FLAGS_max_sessions_per_tenant) < 0) {
    return absl::InvalidArgumentError("--max_sessions_per_tenant must be >= 0 (0 = no limit)");
  }
  if (absl::GetFlag(FLAGS_max_session_tokens) < 0) {
    return absl::InvalidArgumentError("--max_session_tokens must be >= 0 (0 = context length)");
  }
  if (absl::GetFlag(FLAGS_drain_grace) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--drain_grace must be >= 0");
  }
  if (absl::GetFlag(FLAGS_session_ttl) <= absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_session_ttl) > absl::GetFlag(FLAGS_max_session_ttl)) {
    return absl::InvalidArgumentError("--session_ttl must be > 0 and <= --max_session_ttl");
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.metrics.address = absl::GetFlag(FLAGS_metrics_listen);
  options.metrics.worker_threads = absl::GetFlag(FLAGS_metrics_threads);
  options.metrics.idle_timeout = absl::GetFlag(FLAGS_metrics_timeout);
  options.metrics.max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  options.max_receive_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const int64_t quota_mib = absl::GetFlag(FLAGS_grpc_memory_quota_mib);
  if (quota_mib < 16 || quota_mib > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_memory_quota_mib must be in [16, 2^30], got ", quota_mib));
  }
  options.grpc_memory_quota_bytes = quota_mib << 20;
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  options.malloc_trim_interval = absl::GetFlag(FLAGS_malloc_trim_interval);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      server::ServerCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  options.credentials = *std::move(credentials);
  if (absl::Status s = server::ApplyMetricsTlsFlags(options.metrics); !s.ok()) return s;
  options.service.limits.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  options.service.limits.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  options.service.limits.max_session_id_bytes = absl::GetFlag(FLAGS_max_session_id_bytes);
  options.service.limits.max_messages = absl::GetFlag(FLAGS_max_chat_messages);
  options.service.retry_after = absl::GetFlag(FLAGS_retry_after);
  options.service.stream_flush_interval = absl::GetFlag(FLAGS_stream_flush_interval);
  options.service.deadline_slack = absl::GetFlag(FLAGS_deadline_slack);
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens); !path.empty()) {
    absl::StatusOr<server::BearerAuth> auth = server::BearerAuth::FromFile(path);
    if (!auth.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens: ", std::string(auth.status().message())));
    }
    options.service.auth = *std::move(auth);
  }
  if (absl::Status s = ValidateServerOptions(options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", std::string(s.message())));
  }
  return options;
}

absl::StatusOr<engine::ModelOptions> ModelOptionsFromFlags() {
  engine::ModelOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  options.load.huge_pages = absl::GetFlag(FLAGS_weights_huge_pages);
  options.f32_panels = absl::GetFlag(FLAGS_f32_panels);
  options.bf16_panels = absl::GetFlag(FLAGS_bf16_panels);
  options.quant_panels = absl::GetFlag(FLAGS_quant_panels);
  options.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.threads = absl::GetFlag(FLAGS_threads);
  engine::Engine::Options& e = options.engine;
  e.kv_budget_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_kv_budget_mib)) << 20;
  e.kv_prefault = absl::GetFlag(FLAGS_kv_prefault);
  e.block_tokens = absl::GetFlag(FLAGS_kv_block_tokens);
  absl::StatusOr<model::DType> dtype =
      model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "--kv_dtype");
  if (!dtype.ok()) return dtype.status();
  e.kv_dtype = *dtype;
  e.max_running_sequences = absl::GetFlag(FLAGS_max_running);
  e.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  e.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting);
  e.max_waiting_prompt_tokens = absl::GetFlag(FLAGS_max_waiting_prompt_tokens);
  e.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  e.max_sessions_per_tenant = absl::GetFlag(FLAGS_max_sessions_per_tenant);
  e.max_session_tokens = absl::GetFlag(FLAGS_max_session_tokens);
  e.default_session_ttl = absl::GetFlag(FLAGS_session_ttl);
  e.max_session_ttl = absl::GetFlag(FLAGS_max_session_ttl);
  e.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  e.max_cache_salt_bytes = absl::GetFlag(FLAGS_max_cache_salt_bytes);
  e.stop_limits.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  e.stop_limits.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  e.stop_limits.max_stop_token_ids = absl::GetFlag(FLAGS_max_stop_token_ids);
  e.seed = absl::GetFlag(FLAGS_seed);
  e.remote.timeout = absl::GetFlag(FLAGS_session_cache_timeout);
  e.remote.max_pending_stores = absl::GetFlag(FLAGS_session_cache_max_pending_stores);
  if (e.remote.timeout <= absl::ZeroDuration() || e.remote.timeout > absl::Minutes(1)) {
    return absl::InvalidArgumentError("--session_cache_timeout must be in (0, 1m]");
  }
  if (e.remote.max_pending_stores < 1) {
    return absl::InvalidArgumentError("--session_cache_max_pending_stores must be >= 1");
  }
  e.session_lease = absl::GetFlag(FLAGS_session_lease);
  return options;
}

// The session cache client of --session_cache (null when the flag is empty).
absl::StatusOr<std::unique_ptr<cache::RemoteCacheClient>> SessionCacheFromFlags() {
  const std::string target = absl::GetFlag(FLAGS_session_cache);
  if (target.empty()) {
    if (!absl::GetFlag(FLAGS_session_cache_tls_ca).empty() ||
        !absl::GetFlag(FLAGS_session_cache_tls_cert).empty() ||
        !absl::GetFlag(FLAGS_session_cache_tls_key).empty()) {
      return absl::InvalidArgumentError("--session-cache-tls-* need --session-cache");
    }
    return nullptr;
  }
  cache::RemoteCacheClient::Options options;
  options.target = target;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      server::MakeChannelCredentials({.ca_file = absl::GetFlag(FLAGS_session_cache_tls_ca),
                                      .cert_file = absl::GetFlag(FLAGS_session_cache_tls_cert),
                                      .key_file = absl::GetFlag(FLAGS_session_cache_tls_key),
                                      .refresh_interval = server::TlsRefreshIntervalFromFlag()});
  if (!credentials.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session-cache-tls-*: ", credentials.status().message()));
  }
  options.credentials = *std::move(credentials);
  const std::string token_file = absl::GetFlag(FLAGS_session_cache_token_file);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--session_cache_token_file: cannot read ", token_file));
    }
    std::getline(in, options.token);
    options.token = std::string(absl::StripAsciiWhitespace(options.token));
    if (options.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--session_cache_token_file: ", token_file,
                                                     " has no token on its first line"));
    }
  }
  return cache::RemoteCacheClient::Create(options);
}

int Run(const backends::RuntimeInfo& runtime) {
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s);
  absl::StatusOr<ServerOptions> server_options = ServerOptionsFromFlags();
  if (!server_options.ok()) return Fail(server_options.status());
  absl::StatusOr<engine::ModelOptions> model_options = ModelOptionsFromFlags();
  if (!model_options.ok()) return Fail(model_options.status());
  // Declared before the server: the engine uses it until the server is gone.
  absl::StatusOr<std::unique_ptr<cache::RemoteCacheClient>> session_cache = SessionCacheFromFlags();
  if (!session_cache.ok()) return Fail(session_cache.status());
  model_options->engine.remote_cache = session_cache->get();
  model_options->engine.remote.owner = server_options->listen_address;

  // From here on SIGTERM/SIGINT drain (also when they arrive while the model loads).
  absl::StatusOr<server::ShutdownSignals> signals = server::ShutdownSignals::Install();
  if (!signals.ok()) return Fail(signals.status());

  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(*server_options);
  if (!server.ok()) return Fail(server.status());
  (*server)->metrics().SetBuildInfo(runtime);
  std::printf("kvserve: listening on %s (port %d), metrics on %s (port %d); loading %s\n",
              server_options->listen_address.c_str(), (*server)->port(),
              server_options->metrics.address.c_str(), (*server)->metrics_port(),
              model_options->model_path.c_str());
  std::fflush(stdout);

  absl::StatusOr<engine::LoadedModel> loaded = engine::LoadModel(*model_options);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::KvLayout layout = model_options->engine.KvLayoutFor(loaded->model->config());
  if (absl::Status s =
          (*server)->Attach(std::move(loaded->model), std::move(loaded->engine), loaded->backend);
      !s.ok()) {
    return Fail(s);
  }
  {
    const engine::EngineStats stats = (*server)->engine()->Stats();
    const double pool_mib = static_cast<double>(stats.blocks_total) *
                            static_cast<double>(layout.block_bytes()) / (1 << 20);
    std::printf(
        "kvserve: KV pool %.0f MiB (%lld blocks of %zu KiB)%s; resident memory now %.0f MiB\n",
        pool_mib, static_cast<long long>(stats.blocks_total), layout.block_bytes() >> 10,
        model_options->engine.kv_prefault ? ", resident from start" : ", touched as used",
        static_cast<double>(ResidentBytes()) / (1 << 20));
  }
  std::printf("kvserve: ready (backend %s, kernel level %s, BLAS core %s%s%s)\n",
              model_options->backend.c_str(), runtime.kernel_level.c_str(),
              runtime.blas_core.c_str(), *session_cache != nullptr ? ", session cache " : "",
              absl::GetFlag(FLAGS_session_cache).c_str());
  std::fflush(stdout);

  const int signal_number = signals->Wait();
  const absl::Duration grace = absl::GetFlag(FLAGS_drain_grace);
  std::printf("kvserve: signal %d, draining (grace %s; a second signal ends it now)\n",
              signal_number, absl::FormatDuration(grace).c_str());
  std::fflush(stdout);
  bool clean = false;
  std::thread drain([&server, &clean, &signals, grace] {
    clean = (*server)->Drain(grace);
    signals->NotifyDone();
  });
  while (signals->Wait() != server::ShutdownSignals::kDone) {
    std::printf("kvserve: second signal, cancelling what is still running\n");
    std::fflush(stdout);
    (*server)->EndGrace();
  }
  drain.join();
  std::printf("kvserve: stopped (%s)\n",
              clean ? "all requests finished" : "grace period over, the rest cancelled");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace kvserve::service

int main(int argc, char** argv) {
  namespace backends = kvserve::backends;
  // Once the flags are parsed: choose the OpenBLAS core (may re-execute this process)
  // and describe what runs. --version does it too, so it reports the core that runs.
  const auto runtime = [argv] {
    const backends::cpu_blas::BlasCoreDecision blas =
        backends::cpu_blas::EnsureBestBlasCore("kvserve", absl::GetFlag(FLAGS_blas_reexec), argv);
    const backends::RuntimeInfo info =
        backends::DescribeRuntime(absl::GetFlag(FLAGS_backend), blas);
    if (info.kernels_degraded) {
      std::fprintf(stderr,
                   "kvserve: warning: cpu_blas runs its scalar kernels (this CPU has no "
                   "AVX2 + FMA + F16C)\n");
    }
    return info;
  };
  const std::vector<std::string> args = kvserve::common::ParseFlags(
      argc, argv,
      "LLM inference over gRPC (kvserve.v1.Inference), with health, reflection "
      "and Prometheus metrics.\nUsage: kvserve --model models/stories260K.gguf "
      "[--listen 127.0.0.1:50051] [--metrics-listen 127.0.0.1:9464] [--tls-cert FILE "
      "--tls-key FILE [--tls-client-ca FILE]] [--auth-tokens FILE] [flags]\n"
      "Flags accept - or _ (--metrics-listen or --metrics_listen). SIGTERM drains and "
      "exits 0.",
      "server_main.cc", {}, [&runtime] { return backends::FormatVersion("kvserve", runtime()); });
  if (args.size() > 1) {
    std::fprintf(stderr, "kvserve: unexpected argument \"%s\" (see --help)\n", args[1].c_str());
    return 2;
  }
  return kvserve::service::Run(runtime());
}
