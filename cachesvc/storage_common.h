// Helpers the disk tier and the Redis backend share: how a block's key is spelled in a
// file name or a Redis key, the check every record read back from outside the process
// gets, the counters of dropped entries by reason, and the file I/O of the disk stores
// (blocks and session records).
#ifndef KVSERVE_CACHESVC_STORAGE_COMMON_H_
#define KVSERVE_CACHESVC_STORAGE_COMMON_H_

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "cache/block_hash.h"
#include "cache/block_record.h"

namespace kvserve::cachesvc {

// 32 lowercase hex digits of the hash's 16 wire bytes (cache::HashToBytes: lo then hi,
// little-endian), the spelling of a hash in file names and Redis keys.
std::string HashHex(const cache::BlockHash& hash);
// The inverse: false unless `hex` is exactly 32 hex digits (either case).
bool ParseHashHex(std::string_view hex, cache::BlockHash* hash);

// Checks bytes read back from a disk file or a Redis value as the record of block `key`
// of `partition`: the whole record (format, checksum, hash chain: ParseBlockRecord), then
// identity == partition and hash == key (CheckBlockRecord). kOk or the reason to reject.
cache::RecordCheck CheckStoredRecord(std::span<const uint8_t> bytes,
                                     const cache::BlockHash& partition,
                                     const cache::BlockHash& key);
inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Counts of entries a store dropped, by reason name ("capacity", "corrupt_bad_checksum",
// ...), reported in BlockStoreStats::evictions (kvserve_cache_evicted_blocks_total).
// Threading: thread-safe.
class DropCounters {
 public:
  // `known` reasons are reported from the start, at 0 (the ones a store expects to count
  // while it runs), so that dashboards and alerts see their series before the first drop;
  // other reasons appear when first counted.
  explicit DropCounters(const std::vector<std::string>& known = {});
  void Add(std::string_view reason, int64_t n = 1);
  int64_t Get(std::string_view reason) const;
  // Every known or counted reason, sorted by name.
  std::vector<std::pair<std::string, int64_t>> Snapshot() const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, int64_t> counts_ ABSL_GUARDED_BY(mu_);
};

// The reason name of a record that failed CheckStoredRecord: "corrupt_" + RecordCheckName.
std::string CorruptReason(cache::RecordCheck check);
// CorruptReason of every failing check.
std::vector<std::string> CorruptReasons();

// Closes a file descriptor on scope exit. Not thread-safe (one owner).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; the close's errno (0 on success).
  int Close();

 private:
  int fd_;
};

// Reads exactly `n` bytes at `offset` of `fd` into `out`: 0, the errno, or EIO when the
// file ends first.
int ReadExactly(int fd, char* out, size_t n, int64_t offset);

// Creates `path` (which must not exist: O_EXCL), writes `data`, fdatasyncs it when
// `sync`, and closes it: 0, or the errno of the first failure, after which the file is
// removed again.
int WriteNewFile(const std::string& path, std::string_view data, bool sync);

// fsyncs the folder `dir` (makes renames and unlinks in it durable); best effort.
void SyncFolder(const std::string& dir);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_STORAGE_COMMON_H_
