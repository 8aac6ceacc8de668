#include "cachesvc/disk_session_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/hash/hash.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cachesvc/session_encoding.h"

namespace kvserve::cachesvc {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFileMagic = "KVSF";
constexpr char kSuffix[] = ".kvss";
constexpr char kTempMarker[] = ".tmp.";
constexpr size_t kSuffixBytes = sizeof(kSuffix) - 1;
constexpr size_t kHeaderBytes = 16;   // magic, expires_at, id bytes
constexpr size_t kChecksumBytes = 8;  // XXH3-64, at the end
constexpr int32_t kDefaultPageSize = 100;

absl::Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session records: ", std::string(what), " ", path, ": ", std::strerror(err)));
  }
  return absl::UnavailableError(
      absl::StrCat("session records: ", std::string(what), " ", path, ": ", std::strerror(err)));
}

absl::Status NotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no session \"", id, "\""));
}

template <typename T>
void AppendRaw(T v, std::string* out) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, as cache/block_record.cc
  out->append(b, sizeof(T));
}

template <typename T>
T ReadRaw(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// Reads the whole regular file `path` into `out` when it has at most `max_bytes`:
// 0, the errno of a failure, or EFBIG when it is larger.
int ReadFile(const std::string& path, int64_t max_bytes, std::string* out) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EINVAL;
  if (st.st_size > max_bytes) return EFBIG;
  out->resize(static_cast<size_t>(st.st_size));
  return ReadExactly(fd.get(), out->data(), out->size(), 0);
}

}  // namespace

std::string EncodeSessionFile(const StoredSession& session) {
  const std::string body = EncodeSessionValue(session);
  std::string out;
  out.reserve(kHeaderBytes + session.id.size() + body.size() + kChecksumBytes);
  out.append(kFileMagic);
  AppendRaw<int64_t>(session.expires_at == absl::InfiniteFuture()
                         ? std::numeric_limits<int64_t>::max()
                         : absl::ToUnixNanos(session.expires_at),
                     &out);
  AppendRaw<uint32_t>(static_cast<uint32_t>(session.id.size()), &out);
  out.append(session.id);
  out.append(body);
  AppendRaw<uint64_t>(XXH3_64bits(out.data(), out.size()), &out);
  return out;
}

bool DecodeSessionFile(std::string_view bytes, StoredSession* session) {
  if (bytes.size() < kHeaderBytes + kChecksumBytes ||
      bytes.substr(0, kFileMagic.size()) != kFileMagic) {
    return false;
  }
  const size_t checked = bytes.size() - kChecksumBytes;
  if (ReadRaw<uint64_t>(bytes, checked) != XXH3_64bits(bytes.data(), checked)) return false;
  const int64_t expires_ns = ReadRaw<int64_t>(bytes, 4);
  const uint32_t id_bytes = ReadRaw<uint32_t>(bytes, 12);
  if (id_bytes == 0 || id_bytes > checked - kHeaderBytes) return false;
  StoredSession s;
  s.id = std::string(bytes.substr(kHeaderBytes, id_bytes));
  if (!DecodeSessionValue(bytes.substr(kHeaderBytes + id_bytes, checked - kHeaderBytes - id_bytes),
                          &s)) {
    return false;
  }
  s.expires_at = expires_ns == std::numeric_limits<int64_t>::max()
                     ? absl::InfiniteFuture()
                     : absl::FromUnixNanos(expires_ns);
  *session = std::move(s);
  return true;
}

std::string DiskSessionStore::FileName(std::string_view id) {
  if (id.size() <= kMaxHexIdBytes) {
    return absl::StrCat(absl::BytesToHexString(absl::string_view(id.data(), id.size())), kSuffix);
  }
  const XXH128_hash_t h = XXH3_128bits(id.data(), id.size());
  std::string bytes;
  AppendRaw<uint64_t>(h.high64, &bytes);
  AppendRaw<uint64_t>(h.low64, &bytes);
  return absl::StrCat("x", absl::BytesToHexString(bytes), kSuffix);
}

std::string DiskSessionStore::FilePath(std::string_view id) const {
  return absl::StrCat(options_.dir, "/", FileName(id));
}

absl::StatusOr<std::unique_ptr<DiskSessionStore>> DiskSessionStore::Create(const Options& options,
                                                                           absl::Time now) {
  if (options.dir.empty()) return absl::InvalidArgumentError("session records: dir is required");
  if (options.max_records < 1 || options.max_file_bytes < 1) {
    return absl::InvalidArgumentError(
        "session records: max_records and max_file_bytes must be >= 1");
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("session records: cannot create ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<DiskSessionStore> store(new DiskSessionStore(options));
  if (absl::Status scanned = store->Scan(now); !scanned.ok()) return scanned;
  return store;
}

absl::Status DiskSessionStore::Scan(absl::Time now) {
  std::error_code ec;
  fs::directory_iterator it(options_.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("session records: cannot read ", options_.dir, ": ", ec.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string bytes;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (name.find(absl::StrCat(kSuffix, kTempMarker)) != std::string::npos) {
      unlink(path.c_str());
      drops_.Add("startup_temp_file");
      continue;
    }
    if (name.size() <= kSuffixBytes || !name.ends_with(kSuffix)) continue;  // not ours
    StoredSession s;
    std::string_view reason;
    if (ReadFile(path, options_.max_file_bytes, &bytes) != 0 || !DecodeSessionFile(bytes, &s)) {
      reason = "startup_corrupt";
    } else if (FileName(s.id) != name) {
      reason = "startup_name_mismatch";
    } else if (s.expires_at <= now) {
      reason = "startup_expired";
    }
    if (!reason.empty()) {
      unlink(path.c_str());
      drops_.Add(reason);
      continue;
    }
    IndexLocked(s);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("session records: scanning ", options_.dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

std::mutex& DiskSessionStore::StripeOf(const std::string& id) {
  return stripes_[absl::HashOf(id) % kUpdateStripes];
}

void DiskSessionStore::EraseLocked(Index::iterator it) {
  unlink(FilePath(it->first).c_str());
  if (it->second.closed) --tombstones_;
  by_expiry_.erase({it->second.expires_at, it->first});
  if (it->first.size() > kMaxHexIdBytes) long_names_.erase(FileName(it->first));
  index_.erase(it);
}

void DiskSessionStore::DropExpired(absl::Time now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    EraseLocked(index_.find(by_expiry_.begin()->second));
    drops_.Add("expired");
  }
}

absl::Status DiskSessionStore::CheckRoom(const std::string& id, const std::string& name) const {
  if (index_.contains(id)) return absl::OkStatus();  // a replacement
  if (id.size() > kMaxHexIdBytes && long_names_.contains(name)) {
    return absl::FailedPreconditionError(
        "session records: the id's file name (a hash of it) is taken by another id");
  }
  if (static_cast<int64_t>(index_.size()) >= options_.max_records) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session records: the limit of ", options_.max_records, " is reached"));
  }
  return absl::OkStatus();
}

void DiskSessionStore::IndexLocked(const StoredSession& session) {
  const auto [it, added] = index_.try_emplace(session.id);
  Entry& e = it->second;
  if (!added) {
    by_expiry_.erase({e.expires_at, session.id});
    if (e.closed) --tombstones_;
  }
  e.version = session.version;
  e.closed = session.closed;
  if (e.closed) ++tombstones_;
  e.partition = session.partition;
  e.has_head = session.has_head;
  e.head = session.head;
  e.owner = session.owner;
  e.expires_at = session.expires_at;
  e.generation = next_generation_++;
  by_expiry_.emplace(session.expires_at, session.id);
  if (session.id.size() > kMaxHexIdBytes) long_names_[FileName(session.id)] = session.id;
}

void DiskSessionStore::DropBad(const std::string& id, uint64_t generation,
                               std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end() || it->second.generation != generation) return;  // replaced
  EraseLocked(it);
  drops_.Add(reason);
}

absl::Status DiskSessionStore::Put(StoredSession session, absl::Time now) {
  if (session.id.empty()) return absl::InvalidArgumentError("session records: empty id");
  std::lock_guard<std::mutex> stripe(StripeOf(session.id));
  return Write(session, now);
}

absl::Status DiskSessionStore::Write(const StoredSession& session, absl::Time now) {
  const std::string name = FileName(session.id);
  if (session.expires_at <= now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(session.id); it != index_.end()) EraseLocked(it);
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    DropExpired(now);
    if (absl::Status room = CheckRoom(session.id, name); !room.ok()) return room;
  }
  const std::string bytes = EncodeSessionFile(session);
  if (static_cast<int64_t>(bytes.size()) > options_.max_file_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("session records: the record's file has ",
                                                     bytes.size(), " bytes, over max_file_bytes (",
                                                     options_.max_file_bytes, ")"));
  }
  const std::string path = absl::StrCat(options_.dir, "/", name);
  const std::string temp = absl::StrCat(path, kTempMarker, temp_serial_.fetch_add(1));
  if (const int err = WriteNewFile(temp, bytes, options_.fsync); err != 0) {
    return ErrnoStatus("write", temp, err);
  }
  {
    // Checked again: other Puts may have taken the room while this file was written.
    std::lock_guard<std::mutex> lock(mu_);
    DropExpired(now);
    absl::Status room = CheckRoom(session.id, name);
    if (room.ok() && rename(temp.c_str(), path.c_str()) != 0)
      room = ErrnoStatus("rename", temp, errno);
    if (!room.ok()) {
      unlink(temp.c_str());
      return room;
    }
    IndexLocked(session);
  }
  if (options_.fsync) SyncFolder(options_.dir);
  return absl::OkStatus();
}

absl::StatusOr<SessionUpdate> DiskSessionStore::Update(const std::string& id,
                                                       const SessionMutation& mutate,
                                                       absl::Time now) {
  if (id.empty()) return absl::InvalidArgumentError("session records: empty id");
  std::lock_guard<std::mutex> stripe(StripeOf(id));
  absl::StatusOr<std::optional<StoredSession>> current = Read(id, now);
  if (!current.ok()) return current.status();
  SessionUpdate update;
  update.record = *std::move(current);
  const bool existed = update.record.has_value();
  absl::StatusOr<bool> write = mutate(update.record);
  if (!write.ok()) return write.status();
  if (!*write) return update;
  if (update.record.has_value()) {
    update.record->id = id;
    if (absl::Status s = Write(*update.record, now); !s.ok()) return s;
  } else if (existed) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(id); it != index_.end()) EraseLocked(it);
  }
  update.written = true;
  return update;
}

absl::StatusOr<StoredSession> DiskSessionStore::Get(const std::string& id, absl::Time now) {
  absl::StatusOr<std::optional<StoredSession>> found = Read(id, now);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return NotFound(id);
  return **std::move(found);
}

absl::StatusOr<std::optional<StoredSession>> DiskSessionStore::Read(const std::string& id,
                                                                    absl::Time now) {
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    if (it->second.expires_at <= now) {
      EraseLocked(it);
      drops_.Add("expired");
      return std::nullopt;
    }
    generation = it->second.generation;
  }
  std::string bytes;
  const int err = ReadFile(FilePath(id), options_.max_file_bytes, &bytes);
  if (err == ENOENT) {
    DropBad(id, generation, "missing_file");
    return std::nullopt;
  }
  if (err != 0 && err != EIO && err != EFBIG && err != EINVAL) {
    return ErrnoStatus("read", FilePath(id), err);
  }
  StoredSession session;
  if (err != 0 || !DecodeSessionFile(bytes, &session) || session.id != id) {
    DropBad(id, generation, "corrupt");
    return std::nullopt;
  }
  if (session.expires_at <= now) return std::nullopt;
  return session;
}

absl::Status DiskSessionStore::Delete(const std::string& id, absl::Time now) {
  std::lock_guard<std::mutex> stripe(StripeOf(id));
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return NotFound(id);
  const bool expired = it->second.expires_at <= now;
  EraseLocked(it);
  return expired ? NotFound(id) : absl::OkStatus();
}

absl::StatusOr<SessionRecordStore::Page> DiskSessionStore::List(const BlockHash* partition,
                                                                int32_t page_size,
                                                                const std::string& page_token,
                                                                absl::Time now) {
  if (page_size <= 0) page_size = kDefaultPageSize;
  Page page;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = page_token.empty() ? index_.begin() : index_.upper_bound(page_token);
  for (; it != index_.end(); ++it) {
    const Entry& e = it->second;
    if (e.expires_at <= now || e.closed || (partition != nullptr && e.partition != *partition)) {
      continue;
    }
    if (static_cast<int32_t>(page.sessions.size()) == page_size) {
      page.next_page_token = page.sessions.back().id;
      break;
    }
    StoredSession summary;
    summary.id = it->first;
    summary.partition = e.partition;
    summary.has_head = e.has_head;
    summary.head = e.head;
    summary.owner = e.owner;
    summary.expires_at = e.expires_at;
    summary.version = e.version;
    page.sessions.push_back(std::move(summary));
  }
  return page;
}

int64_t DiskSessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(index_.size()) - tombstones_;
}

}  // namespace kvserve::cachesvc
