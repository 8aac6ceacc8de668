#include "cache/block_record.h"

// XXH3_state_t on the stack needs the static-linking-only declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstring>

namespace kvserve::cache {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'B', '1'};
constexpr size_t kChecksumOffset = 88;
// Limits that keep every size computation far from overflow; real blocks are far below.
constexpr uint32_t kMaxLayers = 1024;
constexpr uint32_t kMaxKvDim = 1 << 20;
constexpr uint32_t kMaxBlockTokens = 1 << 16;

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }  // little-endian hosts only
void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
void PutHash(uint8_t* p, const BlockHash& h) {
  Put64(p, h.lo);
  Put64(p + 8, h.hi);
}
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
BlockHash GetHash(const uint8_t* p) { return BlockHash{Get64(p), Get64(p + 8)}; }

// XXH3-64 of the record with the checksum field skipped.
uint64_t Checksum(std::span<const uint8_t> record) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, record.data(), kChecksumOffset);
  XXH3_64bits_update(&state, record.data() + kChecksumOffset + 8,
                     record.size() - kChecksumOffset - 8);
  return XXH3_64bits_digest(&state);
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

size_t BlockRecordBytes(const model::KvLayout& layout) {
  return kBlockRecordHeaderBytes + 4 * static_cast<size_t>(layout.block_tokens) +
         layout.block_bytes();
}

void EncodeBlockRecord(const BlockHash& identity, const BlockHash& parent, const BlockHash& hash,
                       std::span<const int32_t> tokens, const model::KvLayout& layout,
                       int32_t kv_heads, std::span<const uint8_t> payload, std::string* out) {
  out->resize(BlockRecordBytes(layout));
  auto* p = reinterpret_cast<uint8_t*>(out->data());
  std::memset(p, 0, kBlockRecordHeaderBytes);
  std::memcpy(p, kMagic, 4);
  Put16(p + 4, kBlockRecordVersion);
  Put16(p + 6, kBlockRecordHeaderBytes);
  PutHash(p + 8, identity);
  PutHash(p + 24, parent);
  PutHash(p + 40, hash);
  Put32(p + 56, static_cast<uint32_t>(layout.dtype));
  Put32(p + 60, static_cast<uint32_t>(layout.n_layers));
  Put32(p + 64, static_cast<uint32_t>(layout.kv_dim));
  Put32(p + 68, static_cast<uint32_t>(layout.block_tokens));
  Put32(p + 72, static_cast<uint32_t>(kv_heads));
  // 0 for two planes keeps every record written before the field existed valid.
  Put32(p + 76, layout.planes == 2 ? 0u : static_cast<uint32_t>(layout.planes));
  Put64(p + 80, payload.size());
  std::memcpy(p + kBlockRecordHeaderBytes, tokens.data(), 4 * tokens.size());
  std::memcpy(p + kBlockRecordHeaderBytes + 4 * tokens.size(), payload.data(), payload.size());
  Put64(p + kChecksumOffset, Checksum(std::span<const uint8_t>(p, out->size())));
}

std::string_view RecordCheckName(RecordCheck check) {
  switch (check) {
    case RecordCheck::kOk:
      return "ok";
    case RecordCheck::kTruncated:
      return "truncated";
    case RecordCheck::kBadFormat:
      return "bad_format";
    case RecordCheck::kBadChecksum:
      return "bad_checksum";
    case RecordCheck::kBadHash:
      return "bad_hash";
    case RecordCheck::kWrongIdentity:
      return "wrong_identity";
    case RecordCheck::kWrongLayout:
      return "wrong_layout";
    case RecordCheck::kWrongParent:
      return "wrong_parent";
    case RecordCheck::kWrongHash:
      return "wrong_hash";
    case RecordCheck::kWrongTokens:
      return "wrong_tokens";
  }
  return "unknown";
}

RecordCheck ParseBlockRecordHeader(std::span<const uint8_t> header, BlockRecordHeader* out) {
  if (header.size() < kBlockRecordHeaderBytes) return RecordCheck::kTruncated;
  const uint8_t* p = header.data();
  if (std::memcmp(p, kMagic, 4) != 0 || Get16(p + 4) != kBlockRecordVersion ||
      Get16(p + 6) != kBlockRecordHeaderBytes || Get32(p + 76) > 1 || !AllZero(p + 96, 32)) {
    return RecordCheck::kBadFormat;
  }
  const uint32_t dtype = Get32(p + 56);
  const uint32_t layers = Get32(p + 60);
  const uint32_t kv_dim = Get32(p + 64);
  const uint32_t block_tokens = Get32(p + 68);
  const uint32_t kv_heads = Get32(p + 72);
  if ((dtype != static_cast<uint32_t>(model::DType::kF32) &&
       dtype != static_cast<uint32_t>(model::DType::kF16)) ||
      layers == 0 || layers > kMaxLayers || kv_dim == 0 || kv_dim > kMaxKvDim ||
      block_tokens == 0 || block_tokens > kMaxBlockTokens || kv_heads > kv_dim ||
      (kv_heads != 0 && kv_dim % kv_heads != 0)) {
    return RecordCheck::kBadFormat;
  }
  model::KvLayout layout{static_cast<int>(layers), static_cast<int>(kv_dim),
                         static_cast<int>(block_tokens), static_cast<model::DType>(dtype),
                         Get32(p + 76) == 1 ? 1 : 2};
  // Each factor is bounded above, so these products cannot overflow 64 bits.
  if (Get64(p + 80) != layout.block_bytes()) return RecordCheck::kBadFormat;
  out->identity = GetHash(p + 8);
  out->parent = GetHash(p + 24);
  out->hash = GetHash(p + 40);
  out->layout = layout;
  out->record_bytes = BlockRecordBytes(layout);
  return RecordCheck::kOk;
}

RecordCheck ParseBlockRecord(std::span<const uint8_t> bytes, BlockRecordView* view) {
  BlockRecordHeader header;
  const RecordCheck header_check = ParseBlockRecordHeader(bytes, &header);
  if (header_check != RecordCheck::kOk) return header_check;
  const uint8_t* p = bytes.data();
  const size_t want = header.record_bytes;
  const auto block_tokens = static_cast<size_t>(header.layout.block_tokens);
  if (bytes.size() < want) return RecordCheck::kTruncated;
  if (bytes.size() > want) return RecordCheck::kBadFormat;
  if (Get64(p + kChecksumOffset) != Checksum(bytes)) return RecordCheck::kBadChecksum;

  BlockRecordView v;
  v.identity = header.identity;
  v.parent = header.parent;
  v.hash = header.hash;
  v.layout = header.layout;
  v.kv_heads = static_cast<int32_t>(Get32(p + 72));
  v.tokens.resize(block_tokens);
  std::memcpy(v.tokens.data(), p + kBlockRecordHeaderBytes, 4 * block_tokens);
  if (ChainBlockHash(v.parent, v.tokens) != v.hash) return RecordCheck::kBadHash;
  v.payload = bytes.subspan(kBlockRecordHeaderBytes + 4 * block_tokens);
  *view = std::move(v);
  return RecordCheck::kOk;
}

RecordCheck CheckBlockRecord(const BlockRecordView& view, const RecordExpectation& expected) {
  if (expected.identity != nullptr && view.identity != *expected.identity) {
    return RecordCheck::kWrongIdentity;
  }
  if (expected.layout != nullptr && view.layout != *expected.layout) {
    return RecordCheck::kWrongLayout;
  }
  if (expected.parent != nullptr && view.parent != *expected.parent) {
    return RecordCheck::kWrongParent;
  }
  if (expected.hash != nullptr && view.hash != *expected.hash) return RecordCheck::kWrongHash;
  if (!expected.tokens.empty() &&
      (expected.tokens.size() != view.tokens.size() ||
       !std::equal(expected.tokens.begin(), expected.tokens.end(), view.tokens.begin()))) {
    return RecordCheck::kWrongTokens;
  }
  return RecordCheck::kOk;
}

RecordCheck ParseAndCheckBlockRecord(std::span<const uint8_t> bytes,
                                     const RecordExpectation& expected, BlockRecordView* view) {
  const RecordCheck parsed = ParseBlockRecord(bytes, view);
  if (parsed != RecordCheck::kOk) return parsed;
  return CheckBlockRecord(*view, expected);
}

std::string HashToBytes(const BlockHash& hash) {
  std::string out(16, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  PutHash(p, hash);
  return out;
}

bool HashFromBytes(std::string_view bytes, BlockHash* hash) {
  if (bytes.size() != 16) return false;
  *hash = GetHash(reinterpret_cast<const uint8_t*>(bytes.data()));
  return true;
}

}  // namespace kvserve::cache
