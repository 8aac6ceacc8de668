// kvserve-bench cache-storage: store and fetch throughput of the disk tier and the Redis
// backend with block records of a real model's size (default ~1.2 MB: 24 layers,
// kv_dim 768, 16 tokens, f16). Each repeat stores a chain of --blocks records (Put) and
// reads them back (Get, with the full re-check), then erases them; prints each repeat and
// the median.
//
//   kvserve-bench cache-storage [--disk-dir DIR] [--disk-fsync] [--redis HOST:PORT]
//                               [--blocks 64] [--repeats 5]
// Without --redis, a private redis-server is started on a free port when
// /usr/bin/redis-server exists. Fetches from disk read from the page cache (just written).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "cachesvc/disk_block_store.h"
#include "cachesvc/redis_block_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/testing/block_chain.h"
#include "cachesvc/testing/redis_server.h"

ABSL_FLAG(bool, disk_fsync, false, "fsync every block file (DiskBlockStore::Options::fsync)");
ABSL_FLAG(std::string, redis, "", "Redis HOST:PORT (default: start a private redis-server)");

namespace kvserve::cachesvc {
namespace {

constexpr int kDefaultBlocks = 64;
constexpr model::KvLayout kBenchLayout{24, 768, 16, model::DType::kF16};

struct Rates {
  std::vector<double> store_mb_s;
  std::vector<double> fetch_mb_s;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run(const char* name, BlockStore& store, const testing::BlockChain& chain, int repeats) {
  const double mb = static_cast<double>(chain.records.size() * chain.records[0].size()) / 1e6;
  const absl::Time now = absl::Now();
  std::vector<RecordPtr> records;  // shared once, so that Put's time has no copy in it
  for (size_t i = 0; i < chain.records.size(); ++i) records.push_back(chain.record(i));
  Rates rates;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < chain.hashes.size(); ++i) {
      absl::StatusOr<PutOutcome> put =
          store.Put({chain.partition, chain.hashes[i]}, chain.parent(i), records[i], now);
      if (!put.ok() || *put != PutOutcome::kStored) {
        std::fprintf(stderr, "%s: put %zu failed: %s\n", name, i,
                     put.ok() ? "not stored" : put.status().ToString().c_str());
        return 1;
      }
    }
    rates.store_mb_s.push_back(mb / Seconds(start));
    start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < chain.hashes.size(); ++i) {
      absl::StatusOr<RecordPtr> got = store.Get({chain.partition, chain.hashes[i]}, now);
      if (!got.ok() || *got == nullptr) {
        std::fprintf(stderr, "%s: get %zu failed\n", name, i);
        return 1;
      }
    }
    rates.fetch_mb_s.push_back(mb / Seconds(start));
    for (size_t i = chain.hashes.size(); i-- > 0;) store.Erase({chain.partition, chain.hashes[i]});
    std::printf("%s repeat %d: store %.0f MB/s, fetch %.0f MB/s\n", name, r,
                rates.store_mb_s.back(), rates.fetch_mb_s.back());
  }
  std::printf(
      "%s median of %d (%zu records of %zu bytes): store %.0f MB/s (%.0f blocks/s), "
      "fetch %.0f MB/s (%.0f blocks/s)\n",
      name, repeats, chain.records.size(), chain.records[0].size(), Median(rates.store_mb_s),
      Median(rates.store_mb_s) * 1e6 / chain.records[0].size(), Median(rates.fetch_mb_s),
      Median(rates.fetch_mb_s) * 1e6 / chain.records[0].size());
  return 0;
}

// Run's result: 0 = every repeat passed; otherwise it printed what failed.
absl::Status RunStatus(int rc) {
  return rc == 0 ? absl::OkStatus() : absl::InternalError("a store failed (see above)");
}

absl::Status Main() {
  const int blocks = std::max(1, absl::GetFlag(FLAGS_blocks).value_or(kDefaultBlocks));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const testing::BlockChain chain = testing::MakeChain(blocks, "bench", 0, kBenchLayout);

  std::string dir = absl::GetFlag(FLAGS_disk_dir);
  const bool temp_dir = dir.empty();
  if (temp_dir) {
    dir = (std::filesystem::temp_directory_path() / "kvserve_storage_bench").string();
    std::filesystem::remove_all(dir);
  }
  DiskBlockStore::Options disk_options;
  disk_options.dir = dir;
  disk_options.index.capacity_bytes = uint64_t{2} * blocks * chain.records[0].size();
  disk_options.fsync = absl::GetFlag(FLAGS_disk_fsync);
  absl::StatusOr<std::unique_ptr<DiskBlockStore>> disk = DiskBlockStore::Create(disk_options);
  if (!disk.ok()) return disk.status();
  int rc = Run(disk_options.fsync ? "disk(fsync)" : "disk", **disk, chain, repeats);
  disk->reset();
  if (temp_dir) std::filesystem::remove_all(dir);

  RedisOptions redis_options;
  testing::RedisServer server;
  if (const std::string address = absl::GetFlag(FLAGS_redis); !address.empty()) {
    if (absl::Status s = ParseRedisAddress(address, &redis_options); !s.ok()) return s;
  } else if (testing::RedisServer::BinaryExists() && server.Start().ok()) {
    redis_options.port = server.port();
  } else {
    std::printf("redis: skipped (no --redis and no %s)\n", testing::kRedisServerBinary);
    return RunStatus(rc);
  }
  redis_options.timeout = absl::Seconds(2);  // large values on a loaded machine
  std::shared_ptr<RedisClient> client = *RedisClient::Create(redis_options);
  std::unique_ptr<RedisBlockStore> redis = *RedisBlockStore::Create(client, {});
  rc |= Run("redis", *redis, chain, repeats);
  return RunStatus(rc);
}

}  // namespace
}  // namespace kvserve::cachesvc

namespace kvserve::bench {

Subcommand CacheStorageCommand() {
  return {
      .name = "cache-storage",
      .summary = "disk tier and Redis block store throughput with real-sized records",
      .usage =
          "Disk and Redis block store throughput.\n"
          "Usage: kvserve-bench cache-storage [--disk-dir DIR] [--disk-fsync] "
          "[--redis HOST:PORT] [--blocks 64] [--repeats 5]",
      .file = __FILE__,
      .shared_flags = {{"disk_dir", "Folder for the disk tier (default: a temp folder)"},
                       {"blocks", "Records per repeat", "64"},
                       {"repeats", "Repeats (the median is reported)"}},
      .run = [](char**) { return cachesvc::Main(); },
  };
}

}  // namespace kvserve::bench
