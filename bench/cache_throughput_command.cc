// kvserve-bench cache-throughput: store and fetch throughput of kvserve-cache over loopback
// through RemoteCacheClient, and the server's resident memory per stored byte.
//
// Starts an in-process server on 127.0.0.1:0 (memory tier, or memory over disk with
// --disk-dir), or uses --target. Records are s110m-sized f32 blocks by default (12 layers
// x 2 x 16 tokens x 768 x 4 bytes = 1.18 MB), in chains of --chain-blocks. Each repeat
// stores a fresh set of chains (--blocks records) and fetches them back; medians over
// --repeats are printed. RSS overhead = (RSS growth over the stores - record bytes held)
// / record bytes held, for the in-process memory tier.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "cache/remote_cache_client.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/disk_block_store.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "cachesvc/testing/block_chain.h"
#include "cachesvc/tiered_block_store.h"
#include "common/clock.h"
#include "common/stats.h"

ABSL_FLAG(std::string, target, "", "A running kvserve-cache HOST:PORT; empty = in-process.");
ABSL_FLAG(std::string, token, "", "Bearer token for --target.");
ABSL_FLAG(int32_t, chain_blocks, 20, "Blocks per chain (one Store and one Fetch call each).");
ABSL_FLAG(int32_t, layers, 12, "Record shape: layers.");
ABSL_FLAG(int32_t, kv_dim, 768, "Record shape: kv_dim.");
ABSL_FLAG(int64_t, memory_bytes, int64_t{8} << 30, "In-process: memory tier capacity.");

namespace kvserve::cachesvc {
namespace {

constexpr int32_t kDefaultBlocks = 200;

int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib << 10;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

absl::Status ShortCount(const char* call, int32_t n, int32_t expected) {
  return absl::DataLossError(absl::StrCat(call, ": ", n, " of ", expected, " records"));
}

absl::Status Run() {
  const model::KvLayout layout{absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_kv_dim),
                               absl::GetFlag(FLAGS_block_tokens), model::DType::kF32};
  const int32_t chain_blocks = absl::GetFlag(FLAGS_chain_blocks);
  const int32_t chains =
      std::max(1, absl::GetFlag(FLAGS_blocks).value_or(kDefaultBlocks) / chain_blocks);
  const int32_t repeats = absl::GetFlag(FLAGS_repeats);

  std::unique_ptr<CacheServer> server;
  std::string target = absl::GetFlag(FLAGS_target);
  if (target.empty()) {
    auto memory = MemoryBlockStore::Create({.capacity_bytes = absl::GetFlag(FLAGS_memory_bytes)});
    if (!memory.ok()) return memory.status();
    std::unique_ptr<BlockStore> blocks = *std::move(memory);
    if (const std::string dir = absl::GetFlag(FLAGS_disk_dir); !dir.empty()) {
      DiskBlockStore::Options options;
      options.dir = dir;
      options.index.capacity_bytes = uint64_t{64} << 30;
      auto disk = DiskBlockStore::Create(options);
      if (!disk.ok()) return disk.status();
      blocks = std::make_unique<TieredBlockStore>(std::move(blocks), *std::move(disk));
    }
    CacheServerOptions options;
    options.listen_address = "127.0.0.1:0";
    auto started = CacheServer::Start(
        std::move(options), std::move(blocks),
        std::make_unique<MemorySessionStore>(MemorySessionStore::Options{}), common::Clock::Real());
    if (!started.ok()) return started.status();
    server = *std::move(started);
    target = absl::StrCat("127.0.0.1:", server->port());
  }
  auto client =
      cache::RemoteCacheClient::Create({.target = target, .token = absl::GetFlag(FLAGS_token)});
  if (!client.ok()) return client.status();

  std::vector<double> store_gbps, fetch_gbps, overhead;
  for (int32_t r = 0; r < repeats; ++r) {
    std::vector<testing::BlockChain> data;
    int64_t bytes = 0;
    for (int32_t c = 0; c < chains; ++c) {
      data.push_back(testing::MakeChain(chain_blocks, absl::StrCat("bench-", r),
                                        static_cast<uint32_t>(r * 100000 + c + 1), layout));
      for (const std::string& rec : data.back().records) bytes += static_cast<int64_t>(rec.size());
    }
    malloc_trim(0);
    const int64_t rss_before = RssBytes();
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    absl::Time start = absl::Now();
    for (const testing::BlockChain& c : data) {
      absl::StatusOr<int32_t> n = (*client)->Store(c.partition, c.records, deadline);
      if (!n.ok()) return n.status();
      if (*n != chain_blocks) return ShortCount("store", *n, chain_blocks);
    }
    const double store_s = absl::ToDoubleSeconds(absl::Now() - start);
    malloc_trim(0);
    const int64_t rss_after = RssBytes();
    start = absl::Now();
    std::atomic<int64_t> fetched = 0;
    for (const testing::BlockChain& c : data) {
      // on_record runs on the fetch's range threads at once.
      absl::StatusOr<int32_t> n = (*client)->Fetch(
          c.partition, c.hashes, deadline, [&fetched](int32_t, std::string_view record) {
            fetched.fetch_add(static_cast<int64_t>(record.size()), std::memory_order_relaxed);
            return true;
          });
      if (!n.ok()) return n.status();
      if (*n != chain_blocks) return ShortCount("fetch", *n, chain_blocks);
    }
    const double fetch_s = absl::ToDoubleSeconds(absl::Now() - start);
    store_gbps.push_back(static_cast<double>(bytes) / store_s / 1e9);
    fetch_gbps.push_back(static_cast<double>(fetched.load()) / fetch_s / 1e9);
    overhead.push_back(static_cast<double>(rss_after - rss_before - bytes) /
                       static_cast<double>(bytes));
    std::printf(
        "repeat %d: %d records of %zu bytes (%.1f MB): store %.2f GB/s, fetch %.2f GB/s, "
        "RSS growth %.1f MB\n",
        r, chains * chain_blocks, data[0].records[0].size(), static_cast<double>(bytes) / 1e6,
        store_gbps.back(), fetch_gbps.back(), static_cast<double>(rss_after - rss_before) / 1e6);
  }
  std::printf("median of %d: store %.2f GB/s, fetch %.2f GB/s", repeats,
              common::Summarize(store_gbps).median, common::Summarize(fetch_gbps).median);
  if (server != nullptr && absl::GetFlag(FLAGS_disk_dir).empty()) {
    std::printf(", server RSS overhead per stored byte %.2f %%",
                100 * common::Summarize(overhead).median);
  }
  std::printf("\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve::cachesvc

namespace kvserve::bench {

Subcommand CacheThroughputCommand() {
  return {
      .name = "cache-throughput",
      .summary = "kvserve-cache store/fetch GB/s over loopback and its RSS per stored byte",
      .usage =
          "Store/fetch throughput of kvserve-cache over loopback through RemoteCacheClient.\n"
          "Usage: kvserve-bench cache-throughput [--blocks 200] [--repeats 5] "
          "[--disk-dir DIR] [--target HOST:PORT]",
      .file = __FILE__,
      .shared_flags = {{"blocks", "Records stored and fetched per repeat.", "200"},
                       {"block_tokens", "Record shape: tokens per block."},
                       {"repeats", "Repeats (medians are reported)."},
                       {"disk_dir", "In-process: memory over a disk tier in this folder."}},
      .run = [](char**) { return cachesvc::Run(); },
  };
}

}  // namespace kvserve::bench
