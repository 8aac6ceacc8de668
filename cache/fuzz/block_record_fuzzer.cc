// libFuzzer target: block records from the network, a disk or Redis are untrusted. The
// first byte picks a mode: raw bytes straight into ParseBlockRecord and
// ParseBlockRecordHeader; or a valid record of a small layout built from the input, one
// byte of it changed at an input-chosen position, then parsed and checked. Any crash,
// sanitizer report or leak is a bug; rejections are expected. A changed record that
// still parses as valid with the original expectations is a bug too (abort).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_record.h"

namespace {

using kvserve::cache::BlockHash;
using kvserve::cache::BlockRecordHeader;
using kvserve::cache::BlockRecordView;
using kvserve::cache::RecordCheck;

void ParseRaw(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy: a read past the end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data, data + size);
  BlockRecordView view;
  (void)kvserve::cache::ParseBlockRecord(bytes, &view);
  BlockRecordHeader header;
  (void)kvserve::cache::ParseBlockRecordHeader(bytes, &header);
}

void ChangeOneByte(const uint8_t* data, size_t size) {
  if (size < 8) return;
  const kvserve::model::KvLayout layout{
      1 + data[0] % 3, 4 * (1 + data[1] % 4), 1 + data[2] % 8,
      data[3] % 2 ? kvserve::model::DType::kF16 : kvserve::model::DType::kF32};
  const size_t position = (size_t{data[4]} << 8 | data[5]);
  const uint8_t flip = data[6] == 0 ? 1 : data[6];
  data += 7;
  size -= 7;
  const BlockHash identity =
      kvserve::cache::RootBlockHash(kvserve::cache::KvIdentity{size, 0, layout}, "");
  std::vector<int32_t> tokens(static_cast<size_t>(layout.block_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i < size ? data[i] : 0;
  std::vector<uint8_t> payload(layout.block_bytes());
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = size == 0 ? 0 : data[i % size];
  const BlockHash hash = kvserve::cache::ChainBlockHash(identity, tokens);
  std::string record;
  kvserve::cache::EncodeBlockRecord(identity, identity, hash, tokens, layout, 0, payload, &record);
  BlockRecordView view;
  const auto* bytes = reinterpret_cast<const uint8_t*>(record.data());
  if (kvserve::cache::ParseBlockRecord({bytes, record.size()}, &view) != RecordCheck::kOk) {
    std::abort();  // a record as written must parse
  }
  record[position % record.size()] = static_cast<char>(record[position % record.size()] ^ flip);
  std::vector<uint8_t> changed(record.begin(), record.end());
  const kvserve::cache::RecordExpectation expected{&identity, &layout, &identity, &hash, tokens};
  if (kvserve::cache::ParseAndCheckBlockRecord(changed, expected, &view) == RecordCheck::kOk) {
    std::abort();  // a changed byte went unnoticed
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    ParseRaw(data + 1, size - 1);
  } else {
    ChangeOneByte(data + 1, size - 1);
  }
  return 0;
}
