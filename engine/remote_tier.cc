#include "engine/remote_tier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/block_record.h"

namespace kvserve::engine {
namespace {

void LogToStderr(std::string_view line) {
  std::fprintf(stderr, "kvserve: %.*s\n", static_cast<int>(line.size()), line.data());
}

// Smoothing of the measured transfer rate (weight of the newest fetch).
constexpr double kRateWeight = 0.3;
// A round trip assumed in the fetch estimate (Lookup already took one).
constexpr double kRoundTripSeconds = 0.002;

}  // namespace

RemoteTier::RemoteTier(cache::RemoteKvCache* remote, const Options& options,
                       const model::KvLayout& layout, int32_t kv_heads,
                       std::function<void(FetchResult)> on_fetched,
                       std::function<void(uint64_t)> on_stored)
    : remote_(remote),
      options_([&] {
        Options o = options;
        if (!o.log) o.log = LogToStderr;
        return o;
      }()),
      layout_(layout),
      kv_heads_(kv_heads),
      on_fetched_(std::move(on_fetched)),
      on_stored_(std::move(on_stored)),
      bytes_per_second_(options.initial_bytes_per_second) {
  stats_.enabled = true;
  // Every reason from the start, at zero: dashboards and alerts see the series before the
  // first rejection.
  for (int c = static_cast<int>(cache::RecordCheck::kTruncated);
       c <= static_cast<int>(cache::RecordCheck::kWrongTokens); ++c) {
    stats_.rejected_by_reason.emplace_back(
        std::string(cache::RecordCheckName(static_cast<cache::RecordCheck>(c))), 0);
  }
  fetch_thread_ = std::thread([this] { FetchLoop(); });
  store_thread_ = std::thread([this] { StoreLoop(); });
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  fetch_thread_.join();
  store_thread_.join();
}

void RemoteTier::Fetch(FetchJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fetches_.push_back(std::move(job));
  }
  cv_.notify_all();
}

bool RemoteTier::Store(StoreJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || pending_store_jobs_ >= options_.max_pending_stores) {
      ++stats_.store_dropped_total;
      return false;
    }
    ++pending_store_jobs_;
    stores_.push_back(std::move(job));
  }
  cv_.notify_all();
  return true;
}

RemoteCacheStats RemoteTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteCacheStats s = stats_;
  s.failing = failing_;
  return s;
}

absl::Time RemoteTier::Deadline(absl::Time limit) const {
  return std::min(absl::Now() + options_.timeout, limit);
}

void RemoteTier::Observe(const absl::Status& status, std::string_view what) {
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      if (failing_) {
        line = absl::StrCat("session cache reachable again (", failed_calls_in_incident_,
                            " calls failed meanwhile; their requests recomputed)");
      }
      failing_ = false;
      failed_calls_in_incident_ = 0;
    } else {
      ++stats_.errors_total;
      ++failed_calls_in_incident_;
      if (!failing_) {
        line =
            absl::StrCat("session cache call ", std::string(what), " failed: ", status.ToString(),
                         "; requests recompute until it answers again");
      }
      failing_ = true;
    }
  }
  if (!line.empty()) options_.log(line);
}

void RemoteTier::FetchLoop() {
  while (true) {
    FetchJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !fetches_.empty(); });
      if (fetches_.empty()) return;  // stopping, and nothing left to answer
      job = std::move(fetches_.front());
      fetches_.pop_front();
      if (stopping_) {
        lock.unlock();
        on_fetched_(FetchResult{job.id, job.local_blocks, 0});
        continue;
      }
    }
    on_fetched_(RunFetch(job));
  }
}

RemoteTier::FetchResult RemoteTier::RunFetch(const FetchJob& job) {
  FetchResult result{job.id, job.local_blocks, 0};
  const int32_t n = std::min(static_cast<int32_t>(job.chain.size()),
                             job.local_blocks + static_cast<int32_t>(job.destinations.size()));
  if (n - job.local_blocks < options_.min_fetch_blocks) return result;

  absl::StatusOr<cache::RemoteKvCache::Presence> presence = remote_->Lookup(
      job.partition, std::span(job.chain).first(static_cast<size_t>(n)), Deadline(job.deadline));
  Observe(presence.status(), "Lookup");
  if (!presence.ok()) return result;
  const int32_t present = std::clamp(presence->blocks, 0, n);
  double per_block_bytes = 0.0;
  if (present > 0) per_block_bytes = static_cast<double>(presence->bytes) / present;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups_total;
    stats_.lookup_blocks_total += std::max(0, present - job.local_blocks);
  }
  const int32_t wanted = present - job.local_blocks;
  if (wanted < options_.min_fetch_blocks) return result;

  // Fetch only when the transfer is estimated to beat recomputing.
  double rate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rate = bytes_per_second_;
  }
  const double transfer = kRoundTripSeconds + per_block_bytes * wanted / rate;
  const double recompute =
      job.prefill_seconds_per_token * wanted * static_cast<double>(layout_.block_tokens);
  if (!options_.always_fetch && job.prefill_seconds_per_token > 0.0 && recompute <= transfer) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.fetches_skipped_total;
    return result;
  }

  const size_t bt = static_cast<size_t>(layout_.block_tokens);
  const std::span<const cache::BlockHash> chain =
      std::span<const cache::BlockHash>(job.chain).subspan(static_cast<size_t>(job.local_blocks),
                                                           static_cast<size_t>(wanted));
  // on_record runs on the fetch's range threads at once (RemoteKvCache::Fetch): each
  // record is checked and copied into its own block; `accepted` marks the indices whose
  // block holds a checked payload, and the blocks handed back are its leading run (a
  // later range's blocks beyond a gap were written for nothing and are freed).
  std::mutex fetch_mu;
  std::vector<char> accepted(static_cast<size_t>(wanted), 0);
  std::optional<cache::RecordCheck> rejected;  // the first rejection (guarded by fetch_mu)
  std::atomic<int64_t> bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int32_t> fetched = remote_->Fetch(
      job.partition, chain, Deadline(job.deadline), [&](int32_t index, std::string_view record) {
        if (index < 0 || index >= wanted) {
          std::lock_guard<std::mutex> lock(fetch_mu);
          if (!rejected.has_value()) rejected = cache::RecordCheck::kWrongHash;  // not asked for
          return false;
        }
        const size_t i = static_cast<size_t>(job.local_blocks) + static_cast<size_t>(index);
        const cache::BlockHash& parent = i == 0 ? job.partition : job.chain[i - 1];
        const std::span<const int32_t> tokens =
            std::span<const int32_t>(job.tokens).subspan(i * bt, bt);
        cache::BlockRecordView view;
        const cache::RecordCheck check = cache::ParseAndCheckBlockRecord(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(record.data()),
                                     record.size()),
            cache::RecordExpectation{&job.partition, &layout_, &parent, &job.chain[i], tokens},
            &view);
        if (check != cache::RecordCheck::kOk) {
          std::lock_guard<std::mutex> lock(fetch_mu);
          if (!rejected.has_value()) rejected = check;
          return false;
        }
        std::memcpy(job.destinations[static_cast<size_t>(index)], view.payload.data(),
                    view.payload.size());
        bytes.fetch_add(static_cast<int64_t>(record.size()), std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(fetch_mu);
        accepted[static_cast<size_t>(index)] = 1;
        return true;
      });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Observe(fetched.status(), "FetchBlocks");
  while (result.written < wanted && accepted[static_cast<size_t>(result.written)] != 0) {
    ++result.written;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.fetched_blocks_total += result.written;
  stats_.fetched_bytes_total += bytes;
  stats_.fetch_seconds_total += seconds;
  if (bytes > 0 && seconds > 0.0) {
    bytes_per_second_ =
        (1.0 - kRateWeight) * bytes_per_second_ + kRateWeight * (bytes.load() / seconds);
  }
  if (rejected.has_value()) {
    ++stats_.rejected_blocks_total;
    const std::string name(cache::RecordCheckName(*rejected));
    auto it = std::find_if(stats_.rejected_by_reason.begin(), stats_.rejected_by_reason.end(),
                           [&](const auto& e) { return e.first == name; });
    if (it == stats_.rejected_by_reason.end()) {
      stats_.rejected_by_reason.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  return result;
}

void RemoteTier::StoreLoop() {
  while (true) {
    StoreJob job;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !stores_.empty(); });
      if (stores_.empty()) return;
      job = std::move(stores_.front());
      stores_.pop_front();
      stopping = stopping_;
    }
    if (!stopping) RunStore(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_store_jobs_;
    }
    on_stored_(job.key);  // after the last read of its blocks
  }
}

void RemoteTier::RunStore(StoreJob& job) {
  const size_t bt = static_cast<size_t>(layout_.block_tokens);
  std::vector<cache::BlockHash> chain;
  chain.reserve(job.blocks.size());
  for (const auto& b : job.blocks) chain.push_back(b.hash);
  int32_t present = 0;
  if (!chain.empty()) {
    absl::StatusOr<cache::RemoteKvCache::Presence> presence =
        remote_->Lookup(job.partition, chain, Deadline());
    Observe(presence.status(), "Lookup");
    if (!presence.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.store_dropped_total;
      return;
    }
    present = std::clamp(presence->blocks, 0, static_cast<int32_t>(chain.size()));
  }
  // Encode and send in batches, so that memory stays bounded by a batch.
  constexpr size_t kBatchBytes = size_t{32} << 20;
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  bool ok = true;
  auto flush = [&] {
    if (batch.empty() || !ok) return;
    absl::StatusOr<int32_t> stored = remote_->Store(job.partition, batch, Deadline());
    Observe(stored.status(), "StoreBlocks");
    std::lock_guard<std::mutex> lock(mu_);
    if (!stored.ok()) {
      ok = false;
      ++stats_.store_dropped_total;
    } else {
      stats_.stored_blocks_total += *stored;
      stats_.stored_bytes_total += static_cast<int64_t>(batch_bytes);
    }
    batch.clear();
    batch_bytes = 0;
  };
  const size_t block_bytes = layout_.block_bytes();
  for (size_t i = static_cast<size_t>(present); i < job.blocks.size() && ok; ++i) {
    const auto& b = job.blocks[i];
    std::string record;
    cache::EncodeBlockRecord(job.partition, b.parent, b.hash,
                             std::span<const int32_t>(job.tokens).subspan(i * bt, bt), layout_,
                             kv_heads_, std::span<const uint8_t>(b.data, block_bytes), &record);
    batch_bytes += record.size();
    batch.push_back(std::move(record));
    if (batch_bytes >= kBatchBytes) flush();
  }
  flush();
}

}  // namespace kvserve::engine
