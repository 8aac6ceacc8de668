#include "bench/reuse_bench.h"

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/blocking_sink.h"
#include "cache/remote_cache_client.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "model/dtype.h"
#include "model/model.h"

namespace kvserve::bench {
namespace {

absl::StatusOr<engine::Usage> Run(engine::Engine& engine, std::vector<int32_t> prompt) {
  engine::Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = 1;
  auto sink = std::make_shared<BlockingSink>();
  absl::StatusOr<engine::RequestId> id = engine.Submit(std::move(r), sink);
  if (!id.ok()) return id.status();
  if (absl::Status s = sink->Wait(); !s.ok()) return s;
  return sink->usage();
}

// Waits until `engine` has written `blocks` blocks behind and released them.
absl::Status WaitStored(engine::Engine& engine, int64_t blocks) {
  for (const absl::Time end = absl::Now() + absl::Minutes(2); absl::Now() < end;) {
    const engine::EngineStats s = engine.Stats();
    if (s.remote.stored_blocks_total >= blocks && s.blocks_used == 0) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError("the writer did not store its blocks within 2 minutes");
}

}  // namespace

absl::StatusOr<std::vector<ReuseBenchRow>> RunReuseBench(const ReuseBenchOptions& options) {
  if (options.histories.empty() || options.repeats < 1 || options.new_tokens < 1) {
    return absl::InvalidArgumentError("histories, repeats and new_tokens must be positive");
  }
  absl::StatusOr<std::unique_ptr<model::Model>> model = model::Model::Load(options.model_path);
  if (!model.ok()) return model.status();
  const model::ModelConfig& config = (*model)->config();
  const int32_t longest = *std::max_element(options.histories.begin(), options.histories.end());
  if (longest + options.new_tokens + 1 > config.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("a history of ", longest,
                                                   " tokens does not fit the model's context of ",
                                                   config.context_length));
  }

  // The cache service: a real server on loopback, memory tier large enough for all.
  absl::StatusOr<model::DType> kv_dtype = model::KvDTypeFromName(options.kv_dtype, "kv_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  engine::ModelOptions engine_options;
  engine_options.threads = options.threads;
  engine_options.engine.kv_dtype = *kv_dtype;
  const model::KvLayout layout = engine_options.engine.KvLayoutFor(config);
  const size_t blocks_needed =
      static_cast<size_t>((longest + options.new_tokens + 64) / layout.block_tokens + 4);
  // The pool: large enough that the longest history's fetch fits the share of it fetches
  // may reserve (remote.max_import_fraction, 0.5 by default), as in a server whose pool
  // holds several conversations; with a pool of just the history, the fetch would be cut
  // to that share and the rest recomputed.
  engine_options.engine.kv_budget_bytes =
      static_cast<size_t>(static_cast<double>(blocks_needed) /
                          engine_options.engine.remote.max_import_fraction) *
          layout.block_bytes() +
      layout.block_bytes();
  engine_options.engine.max_step_tokens = 512;
  // The pool resident from the start, as kvserve's --kv_prefault default: a replica's
  // pool is faulted in when it starts, not by the copies of its first fetch.
  engine_options.engine.kv_prefault = true;

  cachesvc::MemoryBlockStore::Options store_options;
  store_options.capacity_bytes = static_cast<int64_t>(2 * blocks_needed * layout.block_bytes());
  absl::StatusOr<std::unique_ptr<cachesvc::MemoryBlockStore>> store =
      cachesvc::MemoryBlockStore::Create(store_options);
  if (!store.ok()) return store.status();
  cachesvc::CacheServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<cachesvc::CacheServer>> server = cachesvc::CacheServer::Start(
      server_options, *std::move(store),
      std::make_unique<cachesvc::MemorySessionStore>(cachesvc::MemorySessionStore::Options{}),
      common::Clock::Real());
  if (!server.ok()) return server.status();
  cache::RemoteCacheClient::Options client_options;
  client_options.target = absl::StrCat("127.0.0.1:", (*server)->port());
  absl::StatusOr<std::unique_ptr<cache::RemoteCacheClient>> client =
      cache::RemoteCacheClient::Create(client_options);
  if (!client.ok()) return client.status();

  engine::ModelOptions remote_options = engine_options;
  remote_options.engine.remote_cache = client->get();
  remote_options.engine.remote.timeout = absl::Seconds(60);

  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> token(3, config.vocab_size - 1);
  std::vector<ReuseBenchRow> rows;
  for (const int32_t history : options.histories) {
    ReuseBenchRow row;
    row.history_tokens = history;
    std::vector<int32_t> context(static_cast<size_t>(history));
    for (int32_t& t : context) t = token(rng);
    {
      // The replica that served the conversation so far writes it behind.
      absl::StatusOr<std::unique_ptr<engine::Engine>> writer =
          engine::StartEngine(remote_options, **model);
      if (!writer.ok()) return writer.status();
      absl::StatusOr<engine::Usage> first = Run(**writer, context);
      if (!first.ok()) return first.status();
      if (absl::Status s = WaitStored(**writer, history / layout.block_tokens); !s.ok()) return s;
    }
    std::vector<int32_t> turn = context;
    for (int32_t i = 0; i < options.new_tokens; ++i) turn.push_back(token(rng));
    for (int32_t r = 0; r < options.repeats; ++r) {
      for (const bool remote : {r % 2 == 0, r % 2 != 0}) {  // alternate which goes first
        // A fresh replica each time: nothing of the conversation is local.
        absl::StatusOr<std::unique_ptr<engine::Engine>> engine =
            engine::StartEngine(remote ? remote_options : engine_options, **model);
        if (!engine.ok()) return engine.status();
        absl::StatusOr<engine::Usage> usage = Run(**engine, turn);
        if (!usage.ok()) return usage.status();
        const double ttft = absl::ToDoubleSeconds(usage->time_to_first_token);
        if (remote) {
          const engine::RemoteCacheStats s = (*engine)->Stats().remote;
          if (usage->cached_tokens_remote == 0) {
            return absl::InternalError(absl::StrCat("the remote run fetched nothing (history ",
                                                    history, ", errors ", s.errors_total,
                                                    ", rejected ", s.rejected_blocks_total, ")"));
          }
          // Every whole block of the history comes from the service, or the figure would
          // mix fetching with recomputing.
          const int32_t whole = history / layout.block_tokens * layout.block_tokens;
          if (usage->cached_tokens_remote < whole) {
            return absl::InternalError(
                absl::StrCat("the remote run fetched ", usage->cached_tokens_remote,
                             " of the history's ", whole, " tokens in whole blocks (errors ",
                             s.errors_total, ", rejected ", s.rejected_blocks_total, ")"));
          }
          row.remote_ttft_seconds.push_back(ttft);
          row.cached_tokens_remote = usage->cached_tokens_remote;
          row.fetched_bytes = s.fetched_bytes_total;
          if (s.fetch_seconds_total > 0) {
            row.fetched_gb_per_second = s.fetched_bytes_total / s.fetch_seconds_total / 1e9;
          }
        } else {
          row.cold_ttft_seconds.push_back(ttft);
        }
      }
    }
    rows.push_back(std::move(row));
  }
  (*server)->Shutdown(absl::Seconds(1));
  return rows;
}

}  // namespace kvserve::bench
