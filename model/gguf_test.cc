#include "model/gguf.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/testing/gguf_builder.h"

namespace kvserve::model {
namespace {

using testing::ByteWriter;
using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::MakeTinyLlamaGguf;
using testing::TinyLlamaShape;

absl::StatusOr<GgufFile> Parse(const std::vector<uint8_t>& bytes) {
  return ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
}

// Expects INVALID_ARGUMENT whose message contains `substr`.
void ExpectError(const std::vector<uint8_t>& bytes, const std::string& substr) {
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << substr;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(substr));
}

void PatchU64(std::vector<uint8_t>& b, size_t offset, uint64_t v) {
  std::memcpy(b.data() + offset, &v, 8);
}

TEST(GgufTest, ParsesTinyLlama) {
  const std::vector<uint8_t> bytes = MakeTinyLlamaGguf().Build();
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(f->alignment, 32u);
  EXPECT_EQ(f->data_offset % 32, 0u);
  EXPECT_EQ(f->tensors.size(), 2u + 9u * TinyLlamaShape::kLayers);

  const GgufValue* arch = f->FindMetadata("general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->AsString(), "llama");
  EXPECT_EQ(arch->AsInt(), std::nullopt);
  EXPECT_EQ(f->FindMetadata("llama.embedding_length")->AsInt(), TinyLlamaShape::kDim);
  EXPECT_FLOAT_EQ(*f->FindMetadata("llama.attention.layer_norm_rms_epsilon")->AsFloat(), 1e-5f);
  EXPECT_EQ(f->FindMetadata("no.such.key"), nullptr);

  const GgufValue* tokens = f->FindMetadata("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->Describe(), "array of string");
  EXPECT_EQ(tokens->size(), 6u);
  EXPECT_EQ(tokens->StringAt(1), "<s>");
  EXPECT_EQ(tokens->StringAt(6), std::nullopt);
  EXPECT_EQ(f->FindMetadata("tokenizer.ggml.token_type")->IntAt(3), 6);
  EXPECT_EQ(f->FindMetadata("tokenizer.ggml.scores")->FloatAt(5), -2.0);

  const GgufTensorInfo* k = f->FindTensor("blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dtype, DType::kF32);
  EXPECT_EQ(k->cols(), TinyLlamaShape::kDim);
  EXPECT_EQ(k->rows(), TinyLlamaShape::kKvDim);
  EXPECT_EQ(k->size_bytes, 4u * TinyLlamaShape::kDim * TinyLlamaShape::kKvDim);
  EXPECT_EQ(k->data, bytes.data() + f->data_offset + k->offset);
  // The data is what the builder wrote for this tensor.
  GgufBuilder b = MakeTinyLlamaGguf();
  EXPECT_EQ(std::memcmp(k->data, b.FindTensor("blk.1.attn_k.weight")->data.data(), k->size_bytes),
            0);
}

TEST(GgufTest, AcceptsVersion2) {
  const std::vector<uint8_t> bytes = MakeTinyLlamaGguf().SetVersion(2).Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version, 2u);
}

TEST(GgufTest, RejectsVersion1AndOthers) {
  ExpectError(MakeTinyLlamaGguf().SetVersion(1).Build(), "GGUF version 1 is not supported");
  ExpectError(MakeTinyLlamaGguf().SetVersion(4).Build(), "unsupported GGUF version 4");
  ExpectError(MakeTinyLlamaGguf().SetVersion(0x03000000).Build(), "big-endian");
}

TEST(GgufTest, RejectsWrongMagic) {
  std::vector<uint8_t> b = MakeTinyLlamaGguf().Build();
  b[0] = 'X';
  ExpectError(b, "not a GGUF file");
  ExpectError({}, "end of file reading magic");
}

// Truncation anywhere fails cleanly: every prefix that ends in the header, metadata
// or tensor infos, and prefixes around each tensor's data (inside the data section
// all other prefixes take the same path). Each prefix is copied into an exactly-sized
// buffer so AddressSanitizer sees any read past its end.
TEST(GgufTest, EveryTruncationFailsWithEndOfFile) {
  const std::vector<uint8_t> full = MakeTinyLlamaGguf().Build();
  absl::StatusOr<GgufFile> parsed = Parse(full);
  ASSERT_TRUE(parsed.ok());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= parsed->data_offset; ++n) lengths.push_back(n);
  for (const GgufTensorInfo& t : parsed->tensors) {
    const size_t begin = parsed->data_offset + t.offset, end = begin + t.size_bytes;
    for (size_t n : {begin + 1, begin + 4, end - 1}) lengths.push_back(n);
  }
  for (size_t n : lengths) {
    ASSERT_LT(n, full.size());
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    absl::StatusOr<GgufFile> f = Parse(prefix);
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    ASSERT_THAT(std::string(f.status().message()), HasSubstr("end of file")) << "prefix " << n;
  }
}

TEST(GgufTest, RejectsAbsurdCounts) {
  const std::vector<uint8_t> good = MakeTinyLlamaGguf().Build();
  std::vector<uint8_t> b = good;
  PatchU64(b, 8, uint64_t{1} << 60);  // tensor count
  ExpectError(b, "tensor count 1152921504606846976 cannot fit before end of file");
  b = good;
  PatchU64(b, 16, ~uint64_t{0});  // metadata count
  ExpectError(b, "metadata count 18446744073709551615 cannot fit before end of file");
  b = good;
  PatchU64(b, 24, uint64_t{1} << 62);  // length of the first key
  ExpectError(b, "metadata key 0 length 4611686018427387904 at offset 24 extends past end of file");
}

TEST(GgufTest, RejectsAbsurdArrayLength) {
  ByteWriter w;
  w.Put<uint32_t>(6).Put<uint64_t>(uint64_t{1} << 61);  // float32 array, 2^61 elements
  ExpectError(MakeTinyLlamaGguf().SetRaw("x.scores", 9, w.bytes()).Build(),
              "metadata key x.scores: array length 2305843009213693952 of float32 extends past "
              "end of file");
}

TEST(GgufTest, RejectsAbsurdStringLengthInsideArray) {
  ByteWriter w;
  w.Put<uint32_t>(8).Put<uint64_t>(1).Put<uint64_t>(uint64_t{1} << 40);
  ExpectError(MakeTinyLlamaGguf().SetRaw("x.strings", 9, w.bytes()).Build(),
              "metadata key x.strings[0] length 1099511627776");
}

ByteWriter NestedArrays(int depth) {
  // depth arrays of arrays around one innermost array of two uint8.
  ByteWriter w;
  for (int i = 0; i < depth; ++i) w.Put<uint32_t>(9).Put<uint64_t>(1);
  w.Put<uint32_t>(0).Put<uint64_t>(2).Put<uint8_t>(7).Put<uint8_t>(9);
  return w;
}

TEST(GgufTest, ParsesNestedArraysAndBoundsDepth) {
  ByteWriter ok = NestedArrays(2);  // value = [[[7, 9]]]
  const std::vector<uint8_t> bytes =
      MakeTinyLlamaGguf().SetRaw("x.nested", 9, ok.bytes()).Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufValue* v = f->FindMetadata("x.nested");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->Describe(), "array of array");
  const GgufValue* inner = v->ArrayAt(0)->ArrayAt(0);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->Describe(), "array of uint8");
  EXPECT_EQ(inner->IntAt(1), 9);
  EXPECT_EQ(v->ArrayAt(1), nullptr);

  ByteWriter deep = NestedArrays(kGgufMaxArrayDepth);
  ExpectError(MakeTinyLlamaGguf().SetRaw("x.deep", 9, deep.bytes()).Build(),
              "arrays nested deeper than 8");
}

TEST(GgufTest, ReadsEveryScalarType) {
  GgufBuilder b = MakeTinyLlamaGguf();
  ByteWriter u64, i8, f64, bad_u64;
  u64.Put<uint64_t>(123);
  i8.Put<int8_t>(-5);
  f64.Put<double>(2.5);
  bad_u64.Put<uint64_t>(~uint64_t{0});
  b.SetRaw("x.u64", 10, u64.bytes()).SetRaw("x.i8", 1, i8.bytes()).SetRaw("x.f64", 12, f64.bytes());
  b.SetRaw("x.big", 10, bad_u64.bytes()).SetBool("x.flag", true);
  const std::vector<uint8_t> bytes = b.Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->FindMetadata("x.u64")->AsInt(), 123);
  EXPECT_EQ(f->FindMetadata("x.i8")->AsInt(), -5);
  EXPECT_EQ(f->FindMetadata("x.f64")->AsFloat(), 2.5);
  EXPECT_EQ(f->FindMetadata("x.big")->AsInt(), std::nullopt);  // does not fit in int64
  EXPECT_EQ(f->FindMetadata("x.flag")->AsBool(), true);
  EXPECT_EQ(f->FindMetadata("x.flag")->AsInt(), std::nullopt);
}

TEST(GgufTest, RejectsInvalidValueType) {
  ExpectError(MakeTinyLlamaGguf().SetRaw("x.bad", 13, {0, 0, 0, 0}).Build(),
              "metadata key x.bad type 13 is not a valid GGUF value type");
}

TEST(GgufTest, RejectsDuplicates) {
  ExpectError(MakeTinyLlamaGguf().AppendRaw("general.name", 7, {1}).Build(),
              "duplicate metadata key general.name");
  GgufBuilder b = MakeTinyLlamaGguf();
  GgufBuilder::Tensor copy = *b.FindTensor("blk.0.attn_k.weight");
  b.AddTensor(copy);
  ExpectError(b.Build(), "duplicate tensor name blk.0.attn_k.weight");
}

TEST(GgufTest, RejectsTensorOffsetPastEnd) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("blk.1.attn_k.weight")->offset_override = 1 << 20;
  ExpectError(b.Build(),
              "tensor blk.1.attn_k.weight (offset 1048576, 128 bytes) extends past end of file");
  // The last tensor running one element past the end.
  GgufBuilder c = MakeTinyLlamaGguf();
  std::vector<uint8_t> bytes = c.Build();
  bytes.resize(bytes.size() - 4);
  ExpectError(bytes, "tensor blk.1.ffn_down.weight");
}

TEST(GgufTest, RejectsMisalignedOffset) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("output_norm.weight")->offset_override = 4;
  ExpectError(b.Build(),
              "tensor output_norm.weight offset 4 is not a multiple of the alignment 32");
}

TEST(GgufTest, HonoursGeneralAlignment) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.SetU32("general.alignment", 64).SetLayoutAlignment(64);
  const std::vector<uint8_t> bytes = b.Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment, 64u);
  EXPECT_EQ(f->data_offset % 64, 0u);
  // The same file read with the default alignment of 32 would misplace the data.
  ExpectError(MakeTinyLlamaGguf().SetU32("general.alignment", 3).Build(),
              "general.alignment 3 is not a power of two");
  ExpectError(MakeTinyLlamaGguf().SetU32("general.alignment", 0).Build(),
              "general.alignment 0 is not a power of two");
  ExpectError(MakeTinyLlamaGguf().SetString("general.alignment", "32").Build(),
              "general.alignment has type string, expected an integer");
}

TEST(GgufTest, RejectsUnsupportedTensorType) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("blk.0.attn_q.weight")->ggml_type = 11;
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has unsupported type id 11 (q3_K)");
  b.FindTensor("blk.0.attn_q.weight")->ggml_type = 1000;
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has unsupported type id 1000 (unknown)");
}

TEST(GgufTest, RejectsBadDims) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("blk.0.attn_q.weight")->ne = {8, 8, 1, 1, 1};
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has 5 dimensions");
  b.FindTensor("blk.0.attn_q.weight")->ne = {};
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has 0 dimensions");
  b.FindTensor("blk.0.attn_q.weight")->ne = {8, 0};
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has invalid dimension 1 = 0");
  b.FindTensor("blk.0.attn_q.weight")->ne = {uint64_t{1} << 32, uint64_t{1} << 32};
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight has invalid dimension 1");
  b.FindTensor("blk.0.attn_q.weight")->ne = {uint64_t{1} << 31, uint64_t{1} << 31};
  ExpectError(b.Build(), "tensor blk.0.attn_q.weight is too large");  // 2^64 bytes
  b.FindTensor("blk.0.attn_q.weight")->ne = {uint64_t{1} << 30, uint64_t{1} << 30};
  ExpectError(b.Build(), "4611686018427387904 bytes) extends past end of file");
}

TEST(GgufTest, SizesHalfAndQuantizedTensors) {
  GgufBuilder b;
  b.SetString("general.architecture", "llama");
  b.AddTensor({"h", kGgmlTypeF16, {4, 2}, std::vector<uint8_t>(16), std::nullopt});
  b.AddTensor({"bf", kGgmlTypeBF16, {4}, std::vector<uint8_t>(8), std::nullopt});
  b.AddTensor({"q", kGgmlTypeQ8_0, {64, 3}, std::vector<uint8_t>(2 * 34 * 3), std::nullopt});
  const std::vector<uint8_t> bytes = b.Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->FindTensor("h")->dtype, DType::kF16);
  EXPECT_EQ(f->FindTensor("h")->size_bytes, 16u);
  EXPECT_EQ(f->FindTensor("bf")->dtype, DType::kBF16);
  EXPECT_EQ(f->FindTensor("bf")->rows(), 1);
  EXPECT_EQ(f->FindTensor("q")->dtype, DType::kQ8_0);
  EXPECT_EQ(f->FindTensor("q")->size_bytes, 204u);
  EXPECT_EQ(f->FindTensor("q")->rows(), 3);

  GgufBuilder odd;
  odd.AddTensor({"q", kGgmlTypeQ8_0, {48, 1}, std::vector<uint8_t>(68), std::nullopt});
  ExpectError(odd.Build(), "tensor q: q8_0 row length 48 is not a multiple of 32");
}

TEST(GgufTest, SizesQ4AndKQuantTensors) {
  GgufBuilder b;
  b.SetString("general.architecture", "llama");
  b.AddTensor({"q4", kGgmlTypeQ4_0, {64, 3}, std::vector<uint8_t>(2 * 18 * 3), std::nullopt});
  b.AddTensor({"q4k", kGgmlTypeQ4_K, {512, 2}, std::vector<uint8_t>(2 * 144 * 2), std::nullopt});
  b.AddTensor({"q50", kGgmlTypeQ5_0, {128, 3}, std::vector<uint8_t>(4 * 22 * 3), std::nullopt});
  b.AddTensor({"q51", kGgmlTypeQ5_1, {96, 2}, std::vector<uint8_t>(3 * 24 * 2), std::nullopt});
  b.AddTensor({"q5k", kGgmlTypeQ5_K, {768, 2}, std::vector<uint8_t>(3 * 176 * 2), std::nullopt});
  b.AddTensor({"q6k", kGgmlTypeQ6_K, {256, 3}, std::vector<uint8_t>(210 * 3), std::nullopt});
  const std::vector<uint8_t> bytes = b.Build();  // outlives f
  absl::StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->FindTensor("q4")->dtype, DType::kQ4_0);
  EXPECT_EQ(f->FindTensor("q4")->size_bytes, 108u);
  EXPECT_EQ(f->FindTensor("q4k")->dtype, DType::kQ4_K);
  EXPECT_EQ(f->FindTensor("q4k")->size_bytes, 576u);
  EXPECT_EQ(f->FindTensor("q50")->dtype, DType::kQ5_0);
  EXPECT_EQ(f->FindTensor("q50")->size_bytes, 264u);
  EXPECT_EQ(f->FindTensor("q51")->dtype, DType::kQ5_1);
  EXPECT_EQ(f->FindTensor("q51")->size_bytes, 144u);
  EXPECT_EQ(f->FindTensor("q5k")->dtype, DType::kQ5_K);
  EXPECT_EQ(f->FindTensor("q5k")->size_bytes, 1056u);
  EXPECT_EQ(f->FindTensor("q5k")->rows(), 2);
  EXPECT_EQ(f->FindTensor("q6k")->dtype, DType::kQ6_K);
  EXPECT_EQ(f->FindTensor("q6k")->size_bytes, 630u);
  EXPECT_EQ(f->FindTensor("q6k")->rows(), 3);

  GgufBuilder odd;
  odd.AddTensor({"k", kGgmlTypeQ4_K, {288, 1}, std::vector<uint8_t>(288), std::nullopt});
  ExpectError(odd.Build(), "tensor k: q4_K row length 288 is not a multiple of 256");
  GgufBuilder odd5;
  odd5.AddTensor({"k", kGgmlTypeQ5_K, {320, 1}, std::vector<uint8_t>(352), std::nullopt});
  ExpectError(odd5.Build(), "tensor k: q5_K row length 320 is not a multiple of 256");
  GgufBuilder odd50;
  odd50.AddTensor({"k", kGgmlTypeQ5_0, {48, 1}, std::vector<uint8_t>(44), std::nullopt});
  ExpectError(odd50.Build(), "tensor k: q5_0 row length 48 is not a multiple of 32");
  GgufBuilder short_q51;  // 23 of the 24 bytes of one q5_1 block
  short_q51.AddTensor({"k", kGgmlTypeQ5_1, {32, 1}, std::vector<uint8_t>(23), std::nullopt});
  EXPECT_FALSE(Parse(short_q51.Build()).ok());
  GgufBuilder short_data;
  short_data.AddTensor({"k", kGgmlTypeQ6_K, {256, 2}, std::vector<uint8_t>(210), std::nullopt});
  EXPECT_FALSE(Parse(short_data.Build()).ok());
  GgufBuilder short_q5;  // 175 of the 176 bytes of one q5_K block
  short_q5.AddTensor({"k", kGgmlTypeQ5_K, {256, 1}, std::vector<uint8_t>(175), std::nullopt});
  EXPECT_FALSE(Parse(short_q5.Build()).ok());
}

TEST(GgufTest, EscapesNamesInMessages) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("blk.0.attn_q.weight")->name = std::string("bad\x01name\n", 9);
  b.FindTensor("bad\x01name\n")->ggml_type = 3;
  ExpectError(b.Build(), "tensor bad\\x01name\\n has unsupported type id 3 (q4_1)");
}

TEST(GgufTest, OpenGgufReportsMissingFile) {
  absl::StatusOr<MappedGguf> g = OpenGguf("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("/nonexistent/dir/model.gguf"));
}

TEST(GgufTest, OpenGgufParsesStories260K) {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "KVSERVE_MODELS_DIR is not set";
  absl::StatusOr<MappedGguf> g = OpenGguf(std::string(dir) + "/stories260K.gguf");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->gguf.version, 3u);
  EXPECT_EQ(g->gguf.tensors.size(), 48u);
  EXPECT_EQ(g->gguf.metadata.size(), 19u);
  const GgufTensorInfo* emb = g->gguf.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->rows(), 512);
  EXPECT_EQ(emb->cols(), 64);
}

}  // namespace
}  // namespace kvserve::model
