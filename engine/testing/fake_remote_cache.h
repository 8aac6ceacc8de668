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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

  absl::StatusOr<int32_t> Fetch(const cache::BlockHash& partition,
                                std::span<const cache::BlockHash> chain, absl::Time deadline,
                                const RecordSink& on_record) override {
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
    for (const std::string& r : out) {
      if (!on_record(n, r)) break;
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

  // Session records as the service keeps them (cache/remote_kv_cache.h): versions with
  // compare-and-set, leases, tombstones.
  absl::StatusOr<int64_t> PutSession(const cache::RemoteSession& session, int64_t expected_version,
                                     const std::string& lease_holder,
                                     absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    ++put_calls_;
    if (!put_failure_.ok() && !put_failure_applies_) {
      absl::Status failure = put_failure_;
      put_failure_ = absl::OkStatus();
      return failure;
    }
    auto it = sessions_.find(session.id);
    const int64_t stored = it == sessions_.end() ? 0 : it->second.version;
    if (it != sessions_.end() && it->second.closed) {
      return absl::FailedPreconditionError("session is closed");
    }
    if (stored != expected_version) {
      return absl::AbortedError(absl::StrCat("version is ", stored, ", not ", expected_version));
    }
    if (it != sessions_.end() && LeaseLive(it->second) && it->second.lease_holder != lease_holder) {
      return absl::AbortedError("another holder's lease is live");
    }
    cache::RemoteSession r = session;
    r.version = stored + 1;
    r.closed = false;
    r.lease_holder.clear();
    sessions_[session.id] = std::move(r);
    if (!put_failure_.ok()) {  // applied, and the answer lost
      absl::Status failure = put_failure_;
      put_failure_ = absl::OkStatus();
      return failure;
    }
    return stored + 1;
  }
  absl::StatusOr<cache::RemoteSession> GetSession(const std::string& id,
                                                  const cache::LeaseRequest* lease,
                                                  absl::Time deadline) override {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = get_session_hook_;
    }
    if (hook) hook();  // e.g. blocks: a slow service
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return absl::NotFoundError("no such session");
    cache::RemoteSession& r = it->second;
    if (lease != nullptr && !r.closed) {
      if (LeaseLive(r) && r.lease_holder != lease->holder) {
        return absl::AbortedError("another holder's lease is live");
      }
      r.lease_holder = lease->holder;
      lease_until_[id] = Now() + lease->duration;
    }
    cache::RemoteSession out = r;
    if (!LeaseLive(r)) out.lease_holder.clear();
    return out;
  }
  absl::Status ReleaseLease(const std::string& id, const std::string& holder,
                            absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.lease_holder == holder) it->second.lease_holder.clear();
    return absl::OkStatus();
  }
  absl::Status DeleteSession(const std::string& id, absl::Time deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return absl::UnavailableError("fake session cache is down");
    cache::RemoteSession& r = sessions_[id];
    const int64_t version = r.version;
    const std::string tenant = r.tenant;
    r = cache::RemoteSession{};
    r.id = id;
    r.tenant = tenant;
    r.version = version + 1;
    r.closed = true;
    return absl::OkStatus();
  }
  // Forgets a session record as an eviction or a memory-only restart would.
  void EraseSession(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(id);
  }
  // The stored record of `id` (tests), as GetSession without a lease.
  std::optional<cache::RemoteSession> StoredSession(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return std::nullopt;
    return it->second;
  }
  // Runs at the start of every GetSession, outside the fake's lock.
  void SetGetSessionHook(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    get_session_hook_ = std::move(hook);
  }
  // The next PutSession fails with `status` (once), without writing; with `applied`, it
  // writes (when its checks pass) and then answers `status`, as a call whose answer was lost.
  void FailNextPut(absl::Status status, bool applied = false) {
    std::lock_guard<std::mutex> lock(mu_);
    put_failure_ = std::move(status);
    put_failure_applies_ = applied;
  }
  int64_t put_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return put_calls_;
  }
  // The time leases are measured by (default: the wall clock).
  void SetNow(std::function<absl::Time()> now) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = std::move(now);
  }

 private:
  absl::Time Now() const { return now_ ? now_() : absl::Now(); }
  bool LeaseLive(const cache::RemoteSession& r) const {
    if (r.lease_holder.empty()) return false;
    auto it = lease_until_.find(r.id);
    return it != lease_until_.end() && Now() < it->second;
  }

  using KeyT = std::pair<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>>;
  static KeyT Key(const cache::BlockHash& p, const cache::BlockHash& h) {
    return {{p.lo, p.hi}, {h.lo, h.hi}};
  }

  mutable std::mutex mu_;
  bool down_ = false;
  std::function<void(std::string&)> tamper_;
  std::map<KeyT, std::string> records_;
  std::map<std::string, cache::RemoteSession> sessions_;
  std::map<std::string, absl::Time> lease_until_;
  std::function<absl::Time()> now_;
  absl::Status put_failure_;
  bool put_failure_applies_ = false;
  std::function<void()> get_session_hook_;
  int64_t fetch_calls_ = 0;
  int64_t put_calls_ = 0;
  int32_t fetch_limit_ = -1;
};

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_FAKE_REMOTE_CACHE_H_
