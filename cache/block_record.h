// The one format a KV block has outside the process that computed it: on the wire of
// the session cache service, in its memory, disk and Redis tiers. Self-describing,
// versioned and checked whole; a reader trusts nothing in it it has not checked.
//
// Layout (little-endian; version 1):
//   offset  size  field
//        0     4  magic "KVB1"
//        4     2  version (1)
//        6     2  header bytes (128)
//        8    16  identity digest (cache::RootBlockHash of the KV identity and salt)
//       24    16  parent block hash (the identity digest for a chain's first block)
//       40    16  block hash = ChainBlockHash(parent, token ids)
//       56     4  element type (model::DType: kF32 or kF16)
//       60     4  layers
//       64     4  kv_dim
//       68     4  block_tokens (= number of token ids)
//       72     4  kv heads (0 = not recorded)
//       76     4  KV planes: 0 = two (K and V), 1 = one (the latent of MLA)
//       80     8  payload bytes (= KvLayout::block_bytes())
//       88     8  checksum: XXH3-64 of every other byte of the record
//       96    32  reserved (0)
//      128  4*bt  token ids (int32)
//    128+4*bt  payload: the block exactly as model::KvLayout lays it out in memory
//
// The block hash covers (parent, token ids) and, through the chain's root, the identity:
// ParseBlockRecord recomputes it, so a record whose tokens or parent were altered cannot
// pass as another block even with a matching checksum.
#ifndef KVSERVE_CACHE_BLOCK_RECORD_H_
#define KVSERVE_CACHE_BLOCK_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/block_hash.h"
#include "model/kv_layout.h"

namespace kvserve::cache {

inline constexpr size_t kBlockRecordHeaderBytes = 128;
inline constexpr uint16_t kBlockRecordVersion = 1;

// Bytes of the record of one block of `layout`.
size_t BlockRecordBytes(const model::KvLayout& layout);

// Writes the record of one block into `out` (resized to BlockRecordBytes(layout)).
// Preconditions: tokens.size() == layout.block_tokens, payload.size() ==
// layout.block_bytes(), hash == ChainBlockHash(parent, tokens).
void EncodeBlockRecord(const BlockHash& identity, const BlockHash& parent, const BlockHash& hash,
                       std::span<const int32_t> tokens, const model::KvLayout& layout,
                       int32_t kv_heads, std::span<const uint8_t> payload, std::string* out);

// The outcome of checking a record; every value but kOk is a reason to reject it (the
// caller counts rejections by RecordCheckName and recomputes).
enum class RecordCheck {
  kOk,
  kTruncated,      // shorter than its header says (or than a header)
  kBadFormat,      // magic, version, sizes, element type or reserved bytes wrong
  kBadChecksum,    // bytes changed after writing
  kBadHash,        // block hash != ChainBlockHash(parent, token ids)
  kWrongIdentity,  // another model, layout or salt than expected
  kWrongLayout,    // another shape than expected
  kWrongParent,    // not the continuation of the expected block
  kWrongHash,      // not the block that was asked for
  kWrongTokens,    // token ids differ from the expected ones
};
std::string_view RecordCheckName(RecordCheck check);

// A parsed record. `payload` points into the bytes given to ParseBlockRecord.
struct BlockRecordView {
  BlockHash identity;
  BlockHash parent;
  BlockHash hash;
  model::KvLayout layout;
  int32_t kv_heads = 0;
  std::vector<int32_t> tokens;
  std::span<const uint8_t> payload;
};

// Checks the record's format, checksum and hash chain; fills `view` when kOk. Never
// reads outside `bytes`, whatever they hold.
RecordCheck ParseBlockRecord(std::span<const uint8_t> bytes, BlockRecordView* view);

// What the reader asked for. Empty fields are not checked.
struct RecordExpectation {
  const BlockHash* identity = nullptr;
  const model::KvLayout* layout = nullptr;
  const BlockHash* parent = nullptr;
  const BlockHash* hash = nullptr;
  std::span<const int32_t> tokens;  // checked when non-empty
};

// What the fixed-size header of a record says, checked without the rest of the record
// (for stores that index records kept outside the process: a disk scan at start-up reads
// headers only). `record_bytes` is the size the whole record must have.
struct BlockRecordHeader {
  BlockHash identity;
  BlockHash parent;
  BlockHash hash;
  model::KvLayout layout;
  size_t record_bytes = 0;
};

// Checks the header's format (magic, version, sizes, element type, reserved bytes):
// kTruncated when `header` is shorter than kBlockRecordHeaderBytes, kBadFormat for any
// wrong field, kOk (and fills `out`) otherwise. Checksum and hash chain need the whole
// record: only ParseBlockRecord checks them.
RecordCheck ParseBlockRecordHeader(std::span<const uint8_t> header, BlockRecordHeader* out);

// Checks a parsed record against what the reader asked for.
RecordCheck CheckBlockRecord(const BlockRecordView& view, const RecordExpectation& expected);

// Parses and checks in one call (ParseBlockRecord, then CheckBlockRecord).
RecordCheck ParseAndCheckBlockRecord(std::span<const uint8_t> bytes,
                                     const RecordExpectation& expected, BlockRecordView* view);

// The 16 bytes of a hash as it travels in session_cache.proto (lo then hi, little-endian),
// and back; FromBytes is false unless `bytes` has exactly 16 bytes.
std::string HashToBytes(const BlockHash& hash);
bool HashFromBytes(std::string_view bytes, BlockHash* hash);

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_BLOCK_RECORD_H_
