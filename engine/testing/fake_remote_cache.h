// An in-process cache::RemoteKvCache for engine tests: a map of records and session records
// that several engines ("replicas") share, with switches that make it fail or lie.
// Test-only.
//
// Threading: thread-safe.
#ifndef KVSERVE_ENGINE_TESTING_FAKE_REMOTE_CACHE_H_
#define KVSERVE_ENGINE_TESTING_FAKE_REMOTE_CACHE_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cache/block_record.h"
#include "cache/remote_kv_cache.h"

namespace kvserve::engine::testing {

class FakeRemoteCache final : public cache::RemoteKvCache {
 public:
  // Every call fails with UNAVAILABLE while set.
  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }
  // Applied to every record Fetch hands out (after it was stored intact).
  void SetTamper(std::function<void(std::string&)> tamper) {
    std::lock_guard<std::mutex> lock(mu_);
    tamper_ = std::move(tamper);
  }
  // Fetch hands out at most this many records (the rest "evicted meanwhile"); -1 = all.
  void SetFetchLimit(int32_t limit) {
    std::lock_guard<std::mutex> lock(mu_);
    fetch_limit_ = limit;
  }
  int64_t blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(records_.size());
  }
  int64_t fetch_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fetch_calls_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
    sessions_.clear();
  }

  absl::StatusOr<Presence> Lookup(const cache::BlockHash& partition,
                                  std::span<const cache::BlockHash> chain,
                                  absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    Presence p;
    for (const cache::BlockHash& h : chain) {
      auto it = records_.find(Key(partition, h));
      if (it == records_.end()) break;
      ++p.blocks;
      p.bytes += static_cast<int64_t>(it->second.size());
    }
    return p;
  }

  absl::StatusOr<int32_t> Fetch(
      const cache::BlockHash& partition, std::span<const cache::BlockHash> chain,
      absl::Time deadline, const std::function<bool(int32_t, std::string&&)>& on_record) override {
    std::vector<std::string> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (down_) return absl::UnavailableError("fake session cache is down");
      ++fetch_calls_;
      for (const cache::BlockHash& h : chain) {
        auto it = records_.find(Key(partition, h));
        if (it == records_.end()) break;
        if (fetch_limit_ >= 0 && static_cast<int32_t>(out.size()) >= fetch_limit_) break;
        out.push_back(it->second);
        if (tamper_) tamper_(out.back());
      }
    }
    int32_t n = 0;
    for (std::string& r : out) {
      if (!on_record(n, std::move(r))) break;
      ++n;
    }
    return n;
  }

  // Keeps the records that pass ParseBlockRecord under `partition`, as the service does.
  absl::StatusOr<int32_t> Store(const cache::BlockHash& partition,
                                std::span<const std::string> records,
                                absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    int32_t stored = 0;
    for (const std::string& r : records) {
      cache::BlockRecordView view;
      const auto* bytes = reinterpret_cast<const uint8_t*>(r.data());
      if (cache::ParseBlockRecord({bytes, r.size()}, &view) != cache::RecordCheck::kOk ||
          view.identity != partition) {
        continue;
      }
      records_[Key(partition, view.hash)] = r;
      ++stored;
    }
    return stored;
  }

  absl::Status PutSession(const cache::RemoteSession& session, absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    sessions_[session.id] = session;
    return absl::OkStatus();
  }
  absl::StatusOr<cache::RemoteSession> GetSession(const std::string& id, absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return absl::NotFoundError("no such session");
    return it->second;
  }
  absl::Status DeleteSession(const std::string& id, absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    return sessions_.erase(id) > 0 ? absl::OkStatus() : absl::NotFoundError("no such session");
  }

 private:
  using KeyT = std::pair<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>>;
  static KeyT Key(const cache::BlockHash& p, const cache::BlockHash& h) {
    return {{p.lo, p.hi}, {h.lo, h.hi}};
  }

  mutable std::mutex mu_;
  bool down_ = false;
  std::function<void(std::string&)> tamper_;
  std::map<KeyT, std::string> records_;
  std::map<std::string, cache::RemoteSession> sessions_;
  int64_t fetch_calls_ = 0;
  int32_t fetch_limit_ = -1;
};

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_FAKE_REMOTE_CACHE_H_
