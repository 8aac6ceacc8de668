#include "cachesvc/storage_common.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/escaping.h"

namespace kvserve::cachesvc {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int WriteAll(int fd, const char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t wrote = write(fd, data + done, n - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno;
    done += static_cast<size_t>(wrote);
  }
  return 0;
}

}  // namespace

std::string HashHex(const cache::BlockHash& hash) {
  return absl::BytesToHexString(cache::HashToBytes(hash));
}

bool ParseHashHex(std::string_view hex, cache::BlockHash* hash) {
  if (hex.size() != 32) return false;
  std::string bytes(16, '\0');
  for (size_t i = 0; i < 16; ++i) {
    const int hi = HexDigit(hex[2 * i]);
    const int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return cache::HashFromBytes(bytes, hash);
}

cache::RecordCheck CheckStoredRecord(std::span<const uint8_t> bytes,
                                     const cache::BlockHash& partition,
                                     const cache::BlockHash& key) {
  cache::BlockRecordView view;
  return cache::ParseAndCheckBlockRecord(bytes, {.identity = &partition, .hash = &key}, &view);
}

void DropCounters::Add(std::string_view reason, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  counts_[std::string(reason)] += n;
}

DropCounters::DropCounters(const std::vector<std::string>& known) {
  for (const std::string& reason : known) counts_[reason] = 0;
}

int64_t DropCounters::Get(std::string_view reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = counts_.find(std::string(reason));
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, int64_t>> DropCounters::Snapshot() const {
  std::vector<std::pair<std::string, int64_t>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.assign(counts_.begin(), counts_.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CorruptReason(cache::RecordCheck check) {
  return "corrupt_" + std::string(cache::RecordCheckName(check));
}

std::vector<std::string> CorruptReasons() {
  std::vector<std::string> reasons;
  for (int c = static_cast<int>(cache::RecordCheck::kTruncated);
       c <= static_cast<int>(cache::RecordCheck::kWrongTokens); ++c) {
    reasons.push_back(CorruptReason(static_cast<cache::RecordCheck>(c)));
  }
  return reasons;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

int Fd::Close() {
  const int rc = close(fd_);
  fd_ = -1;
  return rc == 0 ? 0 : errno;
}

int ReadExactly(int fd, char* out, size_t n, int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EIO;
    done += static_cast<size_t>(got);
  }
  return 0;
}

int WriteNewFile(const std::string& path, std::string_view data, bool sync) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return errno;
  int err = WriteAll(fd.get(), data.data(), data.size());
  if (err == 0 && sync && fdatasync(fd.get()) != 0) err = errno;
  if (const int closed = fd.Close(); err == 0) err = closed;
  if (err != 0) unlink(path.c_str());
  return err;
}

void SyncFolder(const std::string& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) fsync(fd.get());
}

}  // namespace kvserve::cachesvc
