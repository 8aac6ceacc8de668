#include "cache/block_record.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace kvserve::cache {
namespace {

constexpr model::KvLayout kLayout{2, 8, 4, model::DType::kF32};

struct Block {
  BlockHash identity;
  BlockHash parent;
  BlockHash hash;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
  std::string record;
};

Block MakeBlock(std::string_view salt = "") {
  Block b;
  b.identity = RootBlockHash(KvIdentity{7, 2, kLayout}, salt);
  b.parent = b.identity;
  b.tokens = {1, 400, 13, 99};
  b.hash = ChainBlockHash(b.parent, b.tokens);
  b.payload.resize(kLayout.block_bytes());
  std::iota(b.payload.begin(), b.payload.end(), uint8_t{3});
  EncodeBlockRecord(b.identity, b.parent, b.hash, b.tokens, kLayout, 2, b.payload, &b.record);
  return b;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(BlockRecordTest, RoundTrips) {
  const Block b = MakeBlock();
  EXPECT_EQ(b.record.size(), BlockRecordBytes(kLayout));
  EXPECT_EQ(b.record.size(), 128 + 4 * 4 + kLayout.block_bytes());
  BlockRecordView v;
  ASSERT_EQ(ParseBlockRecord(Bytes(b.record), &v), RecordCheck::kOk);
  EXPECT_EQ(v.identity, b.identity);
  EXPECT_EQ(v.parent, b.parent);
  EXPECT_EQ(v.hash, b.hash);
  EXPECT_EQ(v.tokens, b.tokens);
  EXPECT_EQ(v.kv_heads, 2);
  EXPECT_EQ(v.layout.n_layers, 2);
  EXPECT_EQ(v.layout.kv_dim, 8);
  EXPECT_EQ(v.layout.block_tokens, 4);
  EXPECT_EQ(std::vector<uint8_t>(v.payload.begin(), v.payload.end()), b.payload);
  const RecordExpectation all{&b.identity, &kLayout, &b.parent, &b.hash, b.tokens};
  EXPECT_EQ(CheckBlockRecord(v, all), RecordCheck::kOk);
}

// Every byte of a record matters: flipping any one of them is caught.
TEST(BlockRecordTest, EveryChangedByteIsRejected) {
  const Block b = MakeBlock();
  for (size_t i = 0; i < b.record.size(); ++i) {
    std::string bad = b.record;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    BlockRecordView v;
    EXPECT_NE(ParseBlockRecord(Bytes(bad), &v), RecordCheck::kOk) << "byte " << i;
  }
}

TEST(BlockRecordTest, TruncatedAndOverlongRecordsAreRejected) {
  const Block b = MakeBlock();
  for (size_t n = 0; n < b.record.size(); ++n) {
    BlockRecordView v;
    const RecordCheck c = ParseBlockRecord(Bytes(b.record.substr(0, n)), &v);
    EXPECT_EQ(c, RecordCheck::kTruncated) << n;
  }
  BlockRecordView v;
  EXPECT_EQ(ParseBlockRecord(Bytes(b.record + "x"), &v), RecordCheck::kBadFormat);
}

// A record re-encoded with altered tokens but an honest checksum still fails: the block
// hash no longer matches its parent and tokens.
TEST(BlockRecordTest, ForgedTokensFailTheHashChain) {
  Block b = MakeBlock();
  std::vector<int32_t> other = b.tokens;
  other[2] = 14;
  std::string forged;
  EncodeBlockRecord(b.identity, b.parent, b.hash, other, kLayout, 2, b.payload, &forged);
  BlockRecordView v;
  EXPECT_EQ(ParseBlockRecord(Bytes(forged), &v), RecordCheck::kBadHash);
}

TEST(BlockRecordTest, ExpectationsAreChecked) {
  const Block b = MakeBlock();
  const Block salted = MakeBlock("tenant-b");
  BlockRecordView v;
  ASSERT_EQ(ParseBlockRecord(Bytes(b.record), &v), RecordCheck::kOk);
  EXPECT_EQ(CheckBlockRecord(v, {.identity = &salted.identity}), RecordCheck::kWrongIdentity);
  const model::KvLayout f16{2, 8, 4, model::DType::kF16};
  EXPECT_EQ(CheckBlockRecord(v, {.layout = &f16}), RecordCheck::kWrongLayout);
  EXPECT_EQ(CheckBlockRecord(v, {.parent = &b.hash}), RecordCheck::kWrongParent);
  EXPECT_EQ(CheckBlockRecord(v, {.hash = &salted.hash}), RecordCheck::kWrongHash);
  const std::vector<int32_t> tokens = {1, 400, 13, 98};
  EXPECT_EQ(CheckBlockRecord(v, {.tokens = tokens}), RecordCheck::kWrongTokens);
  EXPECT_EQ(ParseAndCheckBlockRecord(Bytes(b.record), {.identity = &salted.identity}, &v),
            RecordCheck::kWrongIdentity);
}

// A one-plane (latent attention) block: half the payload of the same width with K and V,
// its own identity digest, and a record that says so and never passes for the other.
TEST(BlockRecordTest, LatentLayoutIsItsOwnFormatAndIdentity) {
  constexpr model::KvLayout kLatent{2, 8, 4, model::DType::kF32, /*planes=*/1};
  EXPECT_EQ(kLatent.block_bytes() * 2, kLayout.block_bytes());
  EXPECT_EQ(kLatent.token_bytes(), 2u * 8 * 4);
  const BlockHash identity = RootBlockHash(KvIdentity{7, 1, kLatent}, "");
  EXPECT_NE(identity, RootBlockHash(KvIdentity{7, 1, kLayout}, ""));
  const std::vector<int32_t> tokens = {1, 400, 13, 99};
  const BlockHash hash = ChainBlockHash(identity, tokens);
  std::vector<uint8_t> payload(kLatent.block_bytes(), 5);
  std::string record;
  EncodeBlockRecord(identity, identity, hash, tokens, kLatent, 1, payload, &record);
  EXPECT_EQ(record.size(), BlockRecordBytes(kLatent));
  BlockRecordView v;
  ASSERT_EQ(ParseBlockRecord(Bytes(record), &v), RecordCheck::kOk);
  EXPECT_EQ(v.layout, kLatent);
  EXPECT_EQ(CheckBlockRecord(v, {.layout = &kLatent}), RecordCheck::kOk);
  EXPECT_EQ(CheckBlockRecord(v, {.layout = &kLayout}), RecordCheck::kWrongLayout);
}

// The header alone gives identity, parent, hash and the record's size, and rejects a
// wrong format without the rest of the record (which only ParseBlockRecord checks).
TEST(BlockRecordTest, HeaderParsesAlone) {
  const Block b = MakeBlock();
  BlockRecordHeader h;
  ASSERT_EQ(ParseBlockRecordHeader(Bytes(b.record.substr(0, kBlockRecordHeaderBytes)), &h),
            RecordCheck::kOk);
  EXPECT_EQ(h.identity, b.identity);
  EXPECT_EQ(h.parent, b.parent);
  EXPECT_EQ(h.hash, b.hash);
  EXPECT_EQ(h.record_bytes, b.record.size());
  EXPECT_EQ(ParseBlockRecordHeader(Bytes(b.record.substr(0, kBlockRecordHeaderBytes - 1)), &h),
            RecordCheck::kTruncated);
  for (size_t i : {0, 4, 6, 56, 60, 64, 68, 80, 100}) {
    std::string bad = b.record.substr(0, kBlockRecordHeaderBytes);
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    EXPECT_EQ(ParseBlockRecordHeader(Bytes(bad), &h), RecordCheck::kBadFormat) << "byte " << i;
  }
}

// Keys are the same in every process and on every host: pinned values (a change here
// orphans every stored block, so it must come with a format version change).
TEST(BlockRecordTest, HashesArePinned) {
  const Block b = MakeBlock();
  EXPECT_EQ(HashToBytes(b.identity).size(), 16u);
  BlockHash back;
  ASSERT_TRUE(HashFromBytes(HashToBytes(b.hash), &back));
  EXPECT_EQ(back, b.hash);
  EXPECT_FALSE(HashFromBytes("short", &back));
  EXPECT_EQ(b.identity, (BlockHash{0x87349a7ad15390efULL, 0x0a91c92c86c80348ULL}));
  EXPECT_EQ(b.hash, (BlockHash{0xbc1194a07b1625a3ULL, 0x041276f0280042d2ULL}));
}

}  // namespace
}  // namespace kvserve::cache
