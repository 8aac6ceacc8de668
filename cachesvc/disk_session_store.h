// Session records on disk (kvserve-cache --disk-dir: <disk-dir>/sessions/), so that a
// cache restarted on the same folder still has its sessions and any replica can continue
// them. One file per session in one flat folder, plus an in-memory index of every
// record's metadata (id -> partition, head, owner, expiry), rebuilt by scanning the
// folder on start. List is answered from the index alone; Get reads the file.
//
// File names: ids come from outside, so a name never contains the id's bytes as they
// are. An id of at most kMaxHexIdBytes bytes is named "<lowercase hex of its bytes>.kvss"
// (two digits per byte: no '/', no "..", unique per id); a longer id is named
// "x<32 hex digits of XXH3-128 of its bytes>.kvss" (bounded length, within NAME_MAX).
// Two long ids whose hashes collide cannot both be stored: the second Put is
// FAILED_PRECONDITION. Every file holds its full id, which must map back to the file's
// name.
//
// File layout (little-endian):
//   offset  size  field
//        0     4  magic "KVSF"
//        4     8  expires_at, Unix nanoseconds (wall clock); INT64_MAX = never
//       12     4  id bytes N
//       16     N  id
//     16+N     B  EncodeSessionValue of the record (cachesvc/session_encoding.h)
//   16+N+B     8  XXH3-64 of every byte before it
// A file is untrusted input: every field is bounds-checked, the checksum covers the rest,
// and the body must decode exactly.
//
// Writes are atomic: the file goes to "<name>.tmp.<n>" in the same folder, optionally
// fdatasynced (Options::fsync; then the folder is fsynced after the rename too), and is
// renamed over the final name. A crash leaves at most a temp file, deleted on start.
//
// Expiry: expires_at is absolute wall-clock time, so a record outlives a restart only
// until it. An expired record is invisible at once; its file is deleted lazily (on every
// Put, before the record limit is checked; when Get or Delete meets it) and on start.
//
// Start-up (Create) reads every "*.kvss" file whole (O(bytes of all records)): a file
// that cannot be read, does not decode, whose id does not map to its name, or that is
// larger than Options::max_file_bytes is deleted and counted ("startup_corrupt",
// "startup_name_mismatch"); expired files are deleted ("startup_expired"); temp files
// ("*.kvss.tmp.*") are deleted ("startup_temp_file"). Records found are kept even beyond
// max_records (the limit only refuses new ids). Other files and folders are left alone.
//
// Get re-checks the file whole: a file that is missing, too short or long, or fails a
// check is deleted, dropped from the index, counted ("missing_file", "corrupt") and
// reported as NOT_FOUND.
//
// Update: a mutex per stripe of ids (kUpdateStripes, by hash of the id) is held from the
// read of the record through the rename of its new file, so updates of one id are
// serialized while updates of different ids mostly run in parallel; Put and Delete take
// it too. Tombstones are files like any record (closed in their body), so they survive a
// restart; they count toward max_records but not toward size().
//
// One process owns the folder: two stores (or processes) on one folder are not supported.
//
// Errors: UNAVAILABLE when the disk fails; RESOURCE_EXHAUSTED at the record limit, when
// the disk is full, or for a record whose file would exceed max_file_bytes.
#ifndef KVSERVE_CACHESVC_DISK_SESSION_STORE_H_
#define KVSERVE_CACHESVC_DISK_SESSION_STORE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cachesvc/block_store.h"
#include "cachesvc/storage_common.h"

namespace kvserve::cachesvc {

// Threading: every method is thread-safe. One mutex guards the index; files are
// encoded, written and read outside it, while renames into place and unlinks happen
// under it (so the index and the folder change together, and a Get that found a file
// corrupt deletes it only if no Put replaced it meanwhile).
//
// Invariants (under mu_): index_ has one entry per "*.kvss" file of the folder this
// store wrote or found on start (files vanishing behind its back are dropped when met);
// tombstones_ counts the entries of index_ that are closed;
// by_expiry_ holds exactly one (expires_at, id) pair per entry of index_; long_names_
// maps the file name of every indexed id longer than kMaxHexIdBytes to that id.
class DiskSessionStore final : public SessionRecordStore {
 public:
  struct Options {
    // The folder of the session files (kvserve-cache: <--disk-dir>/sessions); created if
    // missing. Required.
    std::string dir;
    // Live records held at most; a Put of a new id beyond it is RESOURCE_EXHAUSTED.
    // Default 100,000 (--max-sessions).
    int64_t max_records = 100'000;
    // fdatasync each file before its rename and fsync the folder after it (default off,
    // --disk-fsync: a crash may then lose recent records, or leave a file whose bytes
    // never reached the disk, which the checksum turns into a miss).
    bool fsync = false;
    // Largest file written or read (default 64 MiB, above the 8 MiB of a record at the
    // service's default limits); larger files found are corrupt.
    int64_t max_file_bytes = int64_t{64} << 20;
  };

  // Ids of at most this many bytes are hex-encoded into their file name.
  static constexpr size_t kMaxHexIdBytes = 100;

  // Scans `options.dir` as described above, deleting what expired at `now`.
  // INVALID_ARGUMENT for bad options; UNAVAILABLE when the folder cannot be created or
  // read.
  static absl::StatusOr<std::unique_ptr<DiskSessionStore>> Create(const Options& options,
                                                                  absl::Time now);

  // Writes the file synchronously (returns when it is renamed into place). A record
  // already expired at `now` deletes any record of its id instead. INVALID_ARGUMENT for
  // an empty id.
  absl::Status Put(StoredSession session, absl::Time now) override;
  // Reads the file (as Get), runs the mutation and writes (as Put), all under the id's
  // stripe lock.
  absl::StatusOr<SessionUpdate> Update(const std::string& id, const SessionMutation& mutate,
                                       absl::Time now) override;
  absl::StatusOr<StoredSession> Get(const std::string& id, absl::Time now) override;
  absl::Status Delete(const std::string& id, absl::Time now) override;
  // `page_token` is the last id of the previous page; page_size <= 0 means 100.
  absl::StatusOr<Page> List(const BlockHash* partition, int32_t page_size,
                            const std::string& page_token, absl::Time now) override;
  // Records in the index (expired ones not yet deleted included), tombstones not counted.
  int64_t size() const override;

  // Files deleted by reason ("expired", "corrupt", "missing_file", "startup_*").
  int64_t dropped(std::string_view reason) const { return drops_.Get(reason); }
  std::vector<std::pair<std::string, int64_t>> drops() const { return drops_.Snapshot(); }

  // The file name of session `id` (see above); exposed for tests and tools.
  static std::string FileName(std::string_view id);
  std::string FilePath(std::string_view id) const;

 private:
  struct Entry {
    BlockHash partition;
    bool has_head = false;
    BlockHash head;
    std::string owner;
    absl::Time expires_at;
    int64_t version = 1;
    bool closed = false;
    uint64_t generation = 0;  // changes with every file renamed into place
  };
  static constexpr size_t kUpdateStripes = 64;
  using Index = std::map<std::string, Entry>;

  explicit DiskSessionStore(const Options& options) : options_(options) {}
  absl::Status Scan(absl::Time now);
  std::mutex& StripeOf(const std::string& id);
  // Get's body: nullopt when there is no live record.
  absl::StatusOr<std::optional<StoredSession>> Read(const std::string& id, absl::Time now);
  // Put's body (the caller holds the id's stripe).
  absl::Status Write(const StoredSession& session, absl::Time now);
  // Deletes the files of records expired at `now`.
  void DropExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlinks the file of `it` and forgets it.
  void EraseLocked(Index::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when a record of `id` (file `name`) may be renamed into place now.
  absl::Status CheckRoom(const std::string& id, const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds or replaces the index entry of `session`.
  void IndexLocked(const StoredSession& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `id` after a reader found its file bad, unless a Put replaced the file since
  // the reader saw `generation`.
  void DropBad(const std::string& id, uint64_t generation, std::string_view reason);

  const Options options_;
  std::atomic<uint64_t> temp_serial_{0};
  DropCounters drops_;
  std::array<std::mutex, kUpdateStripes> stripes_;
  mutable std::mutex mu_;
  Index index_ ABSL_GUARDED_BY(mu_);
  int64_t tombstones_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::pair<absl::Time, std::string>> by_expiry_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> long_names_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
};

// The file encoding above (exposed for tests). DecodeSessionFile is true only for bytes
// that pass every check; then `*session` holds the record with its id and expiry.
std::string EncodeSessionFile(const StoredSession& session);
bool DecodeSessionFile(std::string_view bytes, StoredSession* session);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_DISK_SESSION_STORE_H_
