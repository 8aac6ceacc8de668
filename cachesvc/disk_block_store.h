// The disk tier: one file per block record under a directory, bounded by a byte capacity,
// with eviction decided by BlockIndex (chain- and conversation-aware: a chain shrinks tail
// first, so a lookup never reports a block whose parent is gone).
//
// Files: <dir>/<h0h1>/<h2h3>/<partition hex>-<hash hex>.kvb, where h0..h3 are the first
// four hex digits of the block hash (HashHex): a two-level fan-out of 256 x 256 folders,
// created on first use, keeps folders small. A file holds exactly the record's bytes.
//
// Writes are atomic: the record goes to "<final name>.tmp.<n>" in the same folder, is
// optionally fsynced (Options::fsync; default off: a crash may then lose recent blocks
// or leave a file whose bytes never reached the disk, which the full re-check at Get
// turns into a miss), and is renamed over the final name. A crash mid-write leaves only a
// temp file; Create deletes every temp file.
//
// Start-up (Create) rebuilds the index by scanning the directory. Each *.kvb file's
// header is parsed (ParseBlockRecordHeader: magic, version, sizes) and must agree with
// its name (identity == partition, hash == key) and with the file's size; with
// Options::verify_on_open the whole record is checked too (checksum, hash chain; default
// off: it reads every byte on disk, while Get checks each record whole anyway). Files
// failing any of this are deleted and counted ("startup_<reason>"). Parent links come
// from the headers: blocks are re-inserted parents first, in order of their files'
// modification time (a Get refreshes it), so chain structure and, approximately,
// eviction order survive a restart. A block whose parent is not on disk could never be
// found by a lookup: it is deleted ("startup_orphan"). Files whose names are not ours
// are left alone.
//
// Get reads the file outside the lock and checks it whole (CheckStoredRecord); a file
// that fails, has the wrong size or vanished is deleted, erased from the index, counted
// ("corrupt_<reason>", "missing_file") and reported as a miss.
//
// Errors: UNAVAILABLE when the disk fails (an I/O error other than running out of space,
// which is kNoRoom).
#ifndef KVSERVE_CACHESVC_DISK_BLOCK_STORE_H_
#define KVSERVE_CACHESVC_DISK_BLOCK_STORE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "cachesvc/block_index.h"
#include "cachesvc/block_store.h"
#include "cachesvc/indexed_block_store.h"
#include "cachesvc/storage_common.h"

namespace kvserve::cachesvc {

// Threading: every method is thread-safe. One mutex (IndexedBlockStore's) guards the
// index; file reads and writes happen outside it. Deleting evicted or corrupt files
// (unlink, a metadata operation) happens under it, so that a block re-stored right after
// its eviction can never have its new file deleted by the old eviction.
class DiskBlockStore final : public IndexedBlockStore {
 public:
  struct Options {
    // The folder of the files (--disk-dir); created if missing. Required.
    std::string dir;
    // Capacity (--disk-bytes) in index.capacity_bytes (required, > 0), the partition
    // quota and the eviction policy: see BlockIndexOptions.
    BlockIndexOptions index;
    // fsync each file before its rename, and the folder after it (--disk-fsync; default
    // off).
    bool fsync = false;
    // Check every record whole (checksum, hash chain) at start-up instead of its header
    // and size only (--disk-verify-on-open; default off).
    bool verify_on_open = false;
  };

  // Scans `options.dir` as described above. INVALID_ARGUMENT for bad options;
  // UNAVAILABLE when the folder cannot be created or read.
  static absl::StatusOr<std::unique_ptr<DiskBlockStore>> Create(const Options& options);

  absl::StatusOr<RecordPtr> Get(const BlockKey& key, absl::Time now) override;
  // Writes the file synchronously (returns when it is renamed into place). kNoRoom when
  // the record is larger than the capacity or quota, when the disk is full, or when the
  // block's parent is not on disk (not stored: a lookup could never reach it).
  absl::StatusOr<PutOutcome> Put(const BlockKey& key, const BlockHash& parent, RecordPtr record,
                                 absl::Time now) override;
  void Erase(const BlockKey& key) override;
  // Evictions: the index's reasons ("idle", "quota", ...), "corrupt_<reason>" and
  // "missing_file", each from the start (at 0), and the start-up deletions
  // ("startup_<reason>") once counted.
  BlockStoreStats stats() const override;
  std::string name() const override { return "disk"; }

  // The file of block `key` of `partition` (exposed for tests and tools).
  std::string FilePath(const BlockHash& partition, const BlockHash& key) const;

 private:
  DiskBlockStore(const Options& options, std::unique_ptr<BlockIndex> index);
  absl::Status Scan();
  // Deletes the files of evicted blocks and counts them by reason.
  void DeleteEvicted(const std::vector<Evicted>& evicted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases a block found bad by a reader and deletes its file, counted under `reason`.
  void DropBad(const BlockHash& partition, const BlockHash& key, const std::string& reason);
  // Writes `record` to a temp file and renames it to `path`. kNoRoom on ENOSPC/EDQUOT.
  absl::StatusOr<PutOutcome> WriteFile(const std::string& path, const std::string& record);

  const Options options_;
  std::atomic<uint64_t> temp_serial_{0};
  DropCounters drops_;
  // Blocks whose files are being written (not yet in the index).
  absl::flat_hash_set<BlockKey> writing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_DISK_BLOCK_STORE_H_
