#include "cachesvc/storage_common.h"

#include <algorithm>

namespace kvserve::cachesvc {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string HashHex(const cache::BlockHash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::string bytes = cache::HashToBytes(hash);
  std::string out(2 * bytes.size(), '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 0xf];
  }
  return out;
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

int64_t DropCounters::Get(std::string_view reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = counts_.find(std::string(reason));
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, int64_t>> DropCounters::Snapshot() const {
  std::vector<std::pair<std::string, int64_t>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [reason, n] : counts_) {
      if (n != 0) out.emplace_back(reason, n);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CorruptReason(cache::RecordCheck check) {
  return "corrupt_" + std::string(cache::RecordCheckName(check));
}

}  // namespace kvserve::cachesvc
