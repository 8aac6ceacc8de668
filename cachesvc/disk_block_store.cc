#include "cachesvc/disk_block_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cache/block_record.h"

namespace kvserve::cachesvc {
namespace {

namespace fs = std::filesystem;

constexpr char kSuffix[] = ".kvb";
constexpr char kTempMarker[] = ".tmp.";
// "<32 hex>-<32 hex>.kvb"
constexpr size_t kFileNameBytes = 32 + 1 + 32 + 4;

absl::Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  return absl::UnavailableError(
      absl::StrCat("disk tier: ", std::string(what), " ", path, ": ", std::strerror(err)));
}

// (partition, key) from "<partition hex>-<hash hex>.kvb"; false for any other name.
bool ParseFileName(std::string_view name, BlockHash* partition, BlockHash* key) {
  if (name.size() != kFileNameBytes || name[32] != '-' || name.substr(65) != kSuffix) {
    return false;
  }
  return ParseHashHex(name.substr(0, 32), partition) && ParseHashHex(name.substr(33, 32), key);
}

std::optional<BlockHash> ParentOf(const BlockHash& partition, const BlockHash& parent) {
  if (parent == partition) return std::nullopt;
  return parent;
}

// A record file found by the start-up scan.
struct Found {
  BlockHash partition;
  BlockHash key;
  BlockHash parent;
  uint64_t bytes = 0;
  absl::Time mtime;
  std::string path;
};

// The drops a running store counts (the start-up scan's are counted before anyone reads).
std::vector<std::string> RunningDropReasons() {
  std::vector<std::string> reasons = CorruptReasons();
  reasons.push_back("missing_file");
  for (int r = 0; r < kNumEvictReasons; ++r) {
    reasons.emplace_back(EvictReasonName(static_cast<EvictReason>(r)));
  }
  return reasons;
}

}  // namespace

DiskBlockStore::DiskBlockStore(const Options& options, std::unique_ptr<BlockIndex> index)
    : IndexedBlockStore(std::move(index)), options_(options), drops_(RunningDropReasons()) {}

absl::StatusOr<std::unique_ptr<DiskBlockStore>> DiskBlockStore::Create(const Options& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("disk tier: dir is required");
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = BlockIndex::Create(options.index);
  if (!index.ok()) return index.status();
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("disk tier: cannot create ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<DiskBlockStore> store(new DiskBlockStore(options, *std::move(index)));
  if (absl::Status scanned = store->Scan(); !scanned.ok()) return scanned;
  return store;
}

std::string DiskBlockStore::FilePath(const BlockHash& partition, const BlockHash& key) const {
  const std::string hash = HashHex(key);
  return absl::StrCat(options_.dir, "/", hash.substr(0, 2), "/", hash.substr(2, 2), "/",
                      HashHex(partition), "-", hash, kSuffix);
}

absl::Status DiskBlockStore::Scan() {
  std::vector<Found> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(options_.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("disk tier: cannot read ", options_.dir, ": ", ec.message()));
  }
  std::string header(cache::kBlockRecordHeaderBytes, '\0');
  std::string whole;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() >= 2 && it->is_directory(ec)) {
      it.disable_recursion_pending();  // deeper folders are not ours
      continue;
    }
    if (!it->is_regular_file(ec) || it.depth() != 2) continue;
    const std::string path = it->path().string();
    const std::string name = it->path().filename().string();
    if (name.find(kTempMarker) != std::string::npos && name.find(kSuffix) == 32 + 1 + 32) {
      fs::remove(it->path(), ec);
      drops_.Add("startup_temp_file");
      continue;
    }
    Found f;
    if (!ParseFileName(name, &f.partition, &f.key)) continue;  // not ours: left alone
    const std::string expected_path = FilePath(f.partition, f.key);
    std::string reason;
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    cache::BlockRecordHeader h;
    if (expected_path != path) {
      reason = "startup_misplaced";
    } else if (fd.get() < 0 || fstat(fd.get(), &st) != 0 ||
               ReadExactly(fd.get(), header.data(), header.size(), 0) != 0) {
      reason = "startup_unreadable";
    } else if (const cache::RecordCheck c = cache::ParseBlockRecordHeader(AsBytes(header), &h);
               c != cache::RecordCheck::kOk) {
      reason = absl::StrCat("startup_", std::string(cache::RecordCheckName(c)));
    } else if (h.identity != f.partition || h.hash != f.key) {
      reason = "startup_name_mismatch";
    } else if (static_cast<uint64_t>(st.st_size) != h.record_bytes) {
      reason = "startup_wrong_size";
    } else if (options_.verify_on_open) {
      whole.resize(h.record_bytes);
      const cache::RecordCheck c = ReadExactly(fd.get(), whole.data(), whole.size(), 0) != 0
                                       ? cache::RecordCheck::kTruncated
                                       : CheckStoredRecord(AsBytes(whole), f.partition, f.key);
      if (c != cache::RecordCheck::kOk) {
        reason = absl::StrCat("startup_", std::string(cache::RecordCheckName(c)));
      }
    }
    if (!reason.empty()) {
      fs::remove(it->path(), ec);
      drops_.Add(reason);
      continue;
    }
    f.parent = h.parent;
    f.bytes = h.record_bytes;
    f.mtime = absl::TimeFromTimespec(st.st_mtim);
    f.path = path;
    found.push_back(std::move(f));
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("disk tier: scanning ", options_.dir, ": ", ec.message()));
  }

  // Re-insert oldest first, each block right after its parent (a child waits for it).
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  absl::flat_hash_map<BlockKey, std::vector<size_t>> waiting;  // parent -> children (indexes)
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].parent != found[i].partition) {
      waiting[BlockKey{found[i].partition, found[i].parent}].push_back(i);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> ready;
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].parent != found[i].partition) continue;  // inserted after its parent
    ready.push_back(i);
    while (!ready.empty()) {
      const Found& f = found[ready.back()];
      ready.pop_back();
      absl::StatusOr<InsertResult> inserted =
          index_->Insert(f.partition, f.key, ParentOf(f.partition, f.parent), f.bytes, f.mtime);
      if (inserted.ok()) DeleteEvicted(inserted->evicted);
      if (!inserted.ok() || inserted->outcome != InsertOutcome::kInserted) {
        unlink(f.path.c_str());
        drops_.Add("startup_no_room");
        continue;  // its children stay waiting: orphans
      }
      const auto children = waiting.find(BlockKey{f.partition, f.key});
      if (children == waiting.end()) continue;
      // Newest last, so the oldest child is inserted first.
      ready.insert(ready.end(), children->second.rbegin(), children->second.rend());
      waiting.erase(children);
    }
  }
  for (const auto& [parent, children] : waiting) {
    for (size_t i : children) {
      unlink(found[i].path.c_str());
      drops_.Add("startup_orphan");
    }
  }
  return absl::OkStatus();
}

void DiskBlockStore::DeleteEvicted(const std::vector<Evicted>& evicted) {
  for (const Evicted& e : evicted) {
    unlink(FilePath(e.partition, e.key).c_str());
    drops_.Add(EvictReasonName(e.reason));
  }
}

void DiskBlockStore::DropBad(const BlockHash& partition, const BlockHash& key,
                             const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!index_->Erase(partition, key)) return;  // evicted or dropped meanwhile
  unlink(FilePath(partition, key).c_str());
  drops_.Add(reason);
}

absl::StatusOr<RecordPtr> DiskBlockStore::Get(const BlockKey& block, absl::Time now) {
  const auto& [partition, key] = block;
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_->LongestPrefix(partition, std::span(&key, 1), now, /*touch=*/false, &bytes) == 0) {
      return RecordPtr();
    }
  }
  const std::string path = FilePath(partition, key);
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != ENOENT) return ErrnoStatus("open", path, errno);
    DropBad(partition, key, "missing_file");
    return RecordPtr();
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", path, errno);
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    DropBad(
        partition, key,
        CorruptReason(static_cast<uint64_t>(st.st_size) < bytes ? cache::RecordCheck::kTruncated
                                                                : cache::RecordCheck::kBadFormat));
    return RecordPtr();
  }
  auto record = std::make_shared<std::string>(bytes, '\0');
  if (const int err = ReadExactly(fd.get(), record->data(), record->size(), 0); err != 0) {
    if (err != EIO) return ErrnoStatus("read", path, err);
    DropBad(partition, key, CorruptReason(cache::RecordCheck::kTruncated));
    return RecordPtr();
  }
  if (const cache::RecordCheck c = CheckStoredRecord(AsBytes(*record), partition, key);
      c != cache::RecordCheck::kOk) {
    DropBad(partition, key, CorruptReason(c));
    return RecordPtr();
  }
  // The file's modification time is its last use for the next start-up's eviction order.
  futimens(fd.get(), nullptr);
  return RecordPtr(std::move(record));
}

absl::StatusOr<PutOutcome> DiskBlockStore::WriteFile(const std::string& path,
                                                     const std::string& record) {
  const size_t slash = path.rfind('/');
  const std::string folder = path.substr(0, slash);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    if (ec == std::errc::no_space_on_device) return PutOutcome::kNoRoom;
    return ErrnoStatus("mkdir", folder, ec.value());
  }
  const std::string temp = absl::StrCat(path, kTempMarker, temp_serial_.fetch_add(1));
  int err = WriteNewFile(temp, record, options_.fsync);
  if (err == 0 && rename(temp.c_str(), path.c_str()) != 0) {
    err = errno;
    unlink(temp.c_str());
  }
  if (err != 0) {
    if (err == ENOSPC || err == EDQUOT) return PutOutcome::kNoRoom;
    return ErrnoStatus("write", temp, err);
  }
  if (options_.fsync) SyncFolder(folder);
  return PutOutcome::kStored;
}

absl::StatusOr<PutOutcome> DiskBlockStore::Put(const BlockKey& block, const BlockHash& parent,
                                               RecordPtr record, absl::Time now) {
  const auto& [partition, key] = block;
  const BlockKey id{partition, key};
  const std::optional<BlockHash> parent_key = ParentOf(partition, parent);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_->Contains(partition, key) || writing_.contains(id)) {
      return PutOutcome::kAlreadyPresent;  // records of one key are equal
    }
    if (record->size() > options_.index.capacity_bytes ||
        (parent_key.has_value() && !index_->Contains(partition, *parent_key))) {
      return PutOutcome::kNoRoom;
    }
    writing_.insert(id);
  }
  const std::string path = FilePath(partition, key);
  absl::StatusOr<PutOutcome> written = WriteFile(path, *record);
  std::lock_guard<std::mutex> lock(mu_);
  writing_.erase(id);
  if (!written.ok() || *written != PutOutcome::kStored) return written;
  absl::StatusOr<InsertResult> inserted =
      index_->Insert(partition, key, parent_key, record->size(), now);
  if (inserted.ok()) DeleteEvicted(inserted->evicted);
  if (!inserted.ok() || inserted->outcome == InsertOutcome::kNoRoom) {
    // Over the quota, or the parent was evicted while the file was written.
    unlink(path.c_str());
    return PutOutcome::kNoRoom;
  }
  return PutOutcome::kStored;
}

void DiskBlockStore::Erase(const BlockKey& block) {
  const auto& [partition, key] = block;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_->Erase(partition, key)) unlink(FilePath(partition, key).c_str());
}

BlockStoreStats DiskBlockStore::stats() const {
  BlockStoreStats stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const BlockIndexStats index = index_->stats();
    stats.blocks = index.blocks;
    stats.bytes = static_cast<int64_t>(index.bytes);
  }
  stats.capacity_bytes = static_cast<int64_t>(options_.index.capacity_bytes);
  stats.evictions = drops_.Snapshot();
  return stats;
}

}  // namespace kvserve::cachesvc
