#include "service/server_flags.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backends/cpu_blas/blas_startup.h"
#include "model/dtype.h"
#include "server/auth_flags.h"
#include "server/tls_flags.h"

ABSL_FLAG(std::string, model, "",
          "Model file: GGUF, or a llama2.c checkpoint with --tokenizer. Required.");
ABSL_FLAG(std::string, tokenizer, "", "llama2.c tokenizer.bin (only for llama2.c checkpoints).");
ABSL_FLAG(bool, weights_huge_pages, true,
          "Read the model file into memory backed by transparent huge pages (private, "
          "resident; decode streams the weights faster) instead of mapping it (shared with "
          "the page cache, droppable under memory pressure).");
ABSL_FLAG(bool, f32_panels, true,
          "On CPUs with AVX2 (cpu_blas kernel level avx2 and up), repack f32 projection "
          "matrices into 16-row panels at load (batched decode and prefill read each weight "
          "once per 6 (avx2) or 8 (avx512) activation rows; the weights stay resident once).");
ABSL_FLAG(bool, bf16_panels, true,
          "On CPUs with AVX2 (cpu_blas kernel level avx2 and up), repack bf16 projection "
          "matrices into 16-row panels at load (batched decode and prefill read each weight "
          "once per 8 activation rows; the weights stay resident once).");
ABSL_FLAG(std::string, bf16_panel_kernel, "auto",
          "Which kernel multiplies the bf16 panels: dpbf16 (vdpbf16ps), fma (each bf16 pair "
          "widened to f32, two FMAs: the same results where the CPU's vdpbf16ps rounds as "
          "Intel defines it) or auto (the faster of the two on this CPU, measured at start; "
          "the log line 'bf16 panel products' says which).");
ABSL_FLAG(bool, quant_panels, true,
          "Repack q4_0, q8_0, q4_K and q6_K projection matrices (cpu_blas kernel level avx2 "
          "and up) into 16-row panels at load (the same bytes "
          "regrouped: one instruction multiplies 4 columns of 8 or 16 rows, no per-step "
          "decoding or horizontal sums; batched decode and prefill read each weight once per "
          "pass of 3 (avx2) or 8 rows).");
ABSL_FLAG(bool, quant_unpack, true,
          "With --quant_panels: unpack each slab of q6_K panels once per thread for prefill (many "
          "rows) instead of in "
          "every pass over the rows; the same results. false measures the packed passes.");
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
ABSL_FLAG(std::string, http_listen, "127.0.0.1:8080",
          "OpenAI-compatible HTTP API listen address HOST:PORT (docs/http-api.md; port 0 = any "
          "free port); empty = no HTTP API. HTTPS with --tls-cert/--tls-key.");
ABSL_FLAG(int32_t, http_threads, 2,
          "HTTP API worker threads (each multiplexes its connections with epoll; a streamed "
          "response holds no thread).");
ABSL_FLAG(absl::Duration, http_idle_timeout, absl::Seconds(30),
          "HTTP API: a connection is closed when it sends nothing for this long, or when a "
          "request's headers, or then its body, take longer than this to arrive (however "
          "slowly they trickle in). [1s, 1h].");
ABSL_FLAG(int32_t, http_max_connections, 2048,
          "HTTP API: open connections at once; more are refused at accept (kvserve raises its "
          "open-file limit to the hard limit at start).");
ABSL_FLAG(std::string, served_model_name, "",
          "The model id of the HTTP API (requests' \"model\", GET /v1/models); empty = the model "
          "file's name without directory and extension.");
ABSL_FLAG(int32_t, max_n, 8, "HTTP API: the largest n (choices of one request), [1, 128].");
ABSL_FLAG(std::string, chat_template, "",
          "Chat template family for chat messages (gRPC messages, HTTP /v1/chat/completions): "
          "chatml, llama3, llama2, mistral-v3, phi3, gemma, deepseek3, ...; empty = the model "
          "file's own template (tokenizer.chat_template).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address HOST:PORT; empty = no metrics endpoint.");
ABSL_FLAG(int64_t, kv_budget_mib, 512, "KV cache memory (block pool) in MiB.");
ABSL_FLAG(int32_t, kv_block_tokens, 16, "KV block size in token positions.");
ABSL_FLAG(bool, kv_prefault, true,
          "Make the whole KV pool resident at start, so the process's resident size is known "
          "then (printed at start; set memory limits from it) instead of growing as the pool is "
          "first touched.");
ABSL_FLAG(std::string, kv_dtype, "f16",
          "Element type of cached K/V: f16 (half the bytes per cached position in the pool, in "
          "kvserve-cache and on the wire) or f32.");
ABSL_FLAG(std::string, speculative, "none",
          "Speculative decoding's draft source: none, ngram (prompt lookup: proposes what "
          "followed the context's last tokens where they occurred before) or draft_model "
          "(--draft_model; implied by it). Output is unchanged; only speed differs.");
ABSL_FLAG(std::string, draft_model, "",
          "Speculative decoding: a smaller or quantized GGUF model with the same vocabulary "
          "that proposes the drafts (checked at start); run by the same backend and threads.");
ABSL_FLAG(int32_t, draft_threads, 0,
          "Speculative decoding: threads of the draft model's backend; 0 = as --threads.");
ABSL_FLAG(int64_t, draft_kv_mib, 256,
          "Speculative decoding: MiB of K/V for the draft model (its sequences, and finished "
          "ones kept for their next turn); a sequence longer than it holds gets no drafts.");
ABSL_FLAG(double, draft_min_margin, 0.0,
          "Speculative decoding with --draft_model: after a draft token whose logit leads the "
          "runner-up's by less than this (a near-tie, where draft and target often part "
          "ways), draft no further tokens that step. >= 0; 0 = off. The scale is the model's: "
          "0.05 gained 4-5 % on a 1B model and lost 13 % on a 110M one.");
ABSL_FLAG(double, draft_min_acceptance, 0.0,
          "Speculative decoding with --draft_model: after a draft token whose confidence (its "
          "logit's lead over the runner-up's) has been accepted less often than this, as "
          "learnt from the draft's earlier proposals, draft no further tokens that step. "
          "[0, 1); 0 = off.");
ABSL_FLAG(int32_t, draft_max, 5,
          "Speculative decoding: most draft tokens per sequence and step, [1, 64] (a request "
          "may ask for fewer with max_draft_tokens).");
ABSL_FLAG(int32_t, draft_ngram_min, 1, "Speculative ngram source: shortest suffix matched.");
ABSL_FLAG(int32_t, draft_ngram_max, 3, "Speculative ngram source: longest suffix matched.");
ABSL_FLAG(int32_t, speculative_max_batch, 4,
          "Speculative decoding only in steps where at most this many sequences decode "
          "(beyond, a step is no longer bound by reading the weights); 0 = never.");
ABSL_FLAG(bool, speculative_adaptive, true,
          "Speculative decoding: keep drafts only where decode steps with them are measured "
          "faster, per decode-batch size; false: draft whenever allowed.");
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
ABSL_FLAG(bool, session_cache_always_fetch, false,
          "Session cache: fetch every block kvserve-cache holds beyond the local pool, even when "
          "recomputing it is estimated faster (default: only what is estimated faster to fetch).");
ABSL_FLAG(double, session_cache_max_import_fraction, 0.5,
          "Session cache: the fraction of the KV pool that fetches in flight may reserve for "
          "the blocks they bring (the rest of such a prompt is computed), in (0, 1].");
ABSL_FLAG(int32_t, session_cache_max_pending_stores, 64,
          "Session cache: finished requests whose blocks wait to be written behind; more "
          "are dropped and counted.");
ABSL_FLAG(absl::Duration, session_lease, absl::Seconds(30),
          "Session cache: how long a turn's lease on its session lasts unless renewed (it is "
          "renewed while the turn runs); a replica that dies mid-turn locks the session for at "
          "most this long. At most kvserve-cache's --max-session-lease (default 10m).");
ABSL_FLAG(bool, blas_reexec, true, kvserve::backends::cpu_blas::kBlasReexecFlagHelp);
ABSL_FLAG(uint64_t, seed, 0,
          "Seeds the sampling of requests without a seed (session ids never depend on it).");

namespace kvserve::service {
namespace {

// Engine::Options fields whose flag has another name (the rest are named alike).
constexpr std::pair<const char*, const char*> kEngineFieldFlags[] = {
    {"block_tokens", "kv_block_tokens"},
    {"max_running_sequences", "max_running"},
    {"max_waiting_requests", "max_waiting"},
    {"default_session_ttl", "session_ttl"},
    {"remote.timeout", "session_cache_timeout"},
    {"remote.max_pending_stores", "session_cache_max_pending_stores"},
    {"remote.max_import_fraction", "session_cache_max_import_fraction"},
};

// `status` with an engine field's name at the start of its message replaced by its flag's.
absl::Status RenameEngineField(const absl::Status& status) {
  for (const auto& [field, flag] : kEngineFieldFlags) {
    if (absl::StartsWith(status.message(), absl::StrCat(field, " "))) {
      return absl::Status(status.code(),
                          absl::StrCat(flag, status.message().substr(std::string(field).size())));
    }
  }
  return status;
}

// "models/stories260K.gguf" -> "stories260K".
std::string_view ModelNameOfPath(std::string_view path) {
  if (const size_t slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  if (const size_t dot = path.rfind('.'); dot != std::string_view::npos && dot > 0) {
    path = path.substr(0, dot);
  }
  return path.empty() ? std::string_view("default") : path;
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.metrics.address = absl::GetFlag(FLAGS_metrics_listen);
  options.metrics.worker_threads = absl::GetFlag(FLAGS_metrics_threads);
  options.metrics.idle_timeout = absl::GetFlag(FLAGS_metrics_timeout);
  options.metrics.max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  options.max_receive_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  // MiB -> bytes; the server checks the lower bound.
  const int64_t quota_mib = absl::GetFlag(FLAGS_grpc_memory_quota_mib);
  if (quota_mib < 0 || quota_mib > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc_memory_quota_mib must be in [16, 2^30], got ", quota_mib));
  }
  options.grpc_memory_quota_bytes = quota_mib << 20;
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  options.malloc_trim_interval = absl::GetFlag(FLAGS_malloc_trim_interval);
  options.drain_grace = absl::GetFlag(FLAGS_drain_grace);
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
  absl::StatusOr<std::optional<server::BearerAuth>> auth = server::BearerAuthFromFlag();
  if (!auth.ok()) return auth.status();
  options.service.auth = *std::move(auth);
  options.chat_template = absl::GetFlag(FLAGS_chat_template);
  if (const std::string listen = absl::GetFlag(FLAGS_http_listen); !listen.empty()) {
    HttpApiOptions& http = options.http.emplace();
    http.daemon.address = listen;
    http.daemon.worker_threads = absl::GetFlag(FLAGS_http_threads);
    http.daemon.idle_timeout = absl::GetFlag(FLAGS_http_idle_timeout);
    http.daemon.max_connections = absl::GetFlag(FLAGS_http_max_connections);
    if (absl::Status s = server::ApplyHttpTlsFlags(http.daemon); !s.ok()) return s;
    http.max_body_bytes = options.max_receive_message_bytes;
    http.limits.max_n = absl::GetFlag(FLAGS_max_n);
    http.served_model_name = absl::GetFlag(FLAGS_served_model_name);
    if (http.served_model_name.empty()) {
      http.served_model_name = std::string(ModelNameOfPath(absl::GetFlag(FLAGS_model)));
    }
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
  options.bf16_panel_kernel = absl::GetFlag(FLAGS_bf16_panel_kernel);
  options.quant_panels = absl::GetFlag(FLAGS_quant_panels);
  options.quant_unpack = absl::GetFlag(FLAGS_quant_unpack);
  options.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.threads = absl::GetFlag(FLAGS_threads);
  engine::Engine::Options& e = options.engine;
  // MiB -> bytes.
  const int64_t budget_mib = absl::GetFlag(FLAGS_kv_budget_mib);
  if (budget_mib < 1 || budget_mib > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError("kv_budget_mib must be in [1, 16777216]");
  }
  e.kv_budget_bytes = static_cast<size_t>(budget_mib) << 20;
  e.kv_prefault = absl::GetFlag(FLAGS_kv_prefault);
  e.block_tokens = absl::GetFlag(FLAGS_kv_block_tokens);
  absl::StatusOr<model::DType> dtype =
      model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "kv_dtype");
  if (!dtype.ok()) return dtype.status();
  e.kv_dtype = *dtype;
  e.speculative.source = absl::GetFlag(FLAGS_speculative);
  options.draft_model_path = absl::GetFlag(FLAGS_draft_model);
  options.draft_threads = absl::GetFlag(FLAGS_draft_threads);
  if (!options.draft_model_path.empty() && e.speculative.source == "none") {
    e.speculative.source = "draft_model";
  }
  const int64_t draft_kv_mib = absl::GetFlag(FLAGS_draft_kv_mib);
  if (draft_kv_mib < 1 || draft_kv_mib > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError("draft_kv_mib must be in [1, 16777216]");
  }
  options.draft.kv_bytes = draft_kv_mib << 20;
  options.draft.min_margin = absl::GetFlag(FLAGS_draft_min_margin);
  options.draft.min_acceptance = absl::GetFlag(FLAGS_draft_min_acceptance);
  e.speculative.draft_max = absl::GetFlag(FLAGS_draft_max);
  e.speculative.ngram.min_ngram = absl::GetFlag(FLAGS_draft_ngram_min);
  e.speculative.ngram.max_ngram = absl::GetFlag(FLAGS_draft_ngram_max);
  e.speculative.max_batch = absl::GetFlag(FLAGS_speculative_max_batch);
  e.speculative.adaptive = absl::GetFlag(FLAGS_speculative_adaptive);
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
  e.remote.always_fetch = absl::GetFlag(FLAGS_session_cache_always_fetch);
  e.remote.max_import_fraction = absl::GetFlag(FLAGS_session_cache_max_import_fraction);
  e.session_lease = absl::GetFlag(FLAGS_session_lease);
  return options;
}

}  // namespace

absl::StatusOr<ProcessOptions> ProcessOptionsFromFlags() {
  ProcessOptions options;
  absl::StatusOr<ServerOptions> server = ServerOptionsFromFlags();
  if (!server.ok()) return server.status();
  options.server = *std::move(server);
  absl::StatusOr<engine::ModelOptions> model = ModelOptionsFromFlags();
  if (!model.ok()) return model.status();
  options.model = *std::move(model);
  options.session_cache = {.target = absl::GetFlag(FLAGS_session_cache),
                           .token_file = absl::GetFlag(FLAGS_session_cache_token_file),
                           .tls_ca_file = absl::GetFlag(FLAGS_session_cache_tls_ca),
                           .tls_cert_file = absl::GetFlag(FLAGS_session_cache_tls_cert),
                           .tls_key_file = absl::GetFlag(FLAGS_session_cache_tls_key),
                           .tls_refresh_interval = server::TlsRefreshIntervalFromFlag()};
  if (absl::Status s = ValidateProcessOptions(options); !s.ok()) return RenameEngineField(s);
  return options;
}

bool BlasReexecFromFlag() { return absl::GetFlag(FLAGS_blas_reexec); }

std::string BackendFromFlag() { return absl::GetFlag(FLAGS_backend); }

}  // namespace kvserve::service
