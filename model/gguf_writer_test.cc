#include "model/gguf_writer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf.h"

namespace kvserve::model {
namespace {

// Reads the bytes back independently of the writer, following the GGUF v3 layout.
class Cursor {
 public:
  explicit Cursor(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T Pod() {
    T v{};
    EXPECT_LE(pos_ + sizeof(T), bytes_.size());
    if (pos_ + sizeof(T) <= bytes_.size()) std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string Str() {
    const uint64_t n = Pod<uint64_t>();
    EXPECT_LE(pos_ + n, bytes_.size());
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

TEST(GgufWriterTest, EveryMetadataTypeIsLaidOutAsSpecified) {
  GgufWriter w;
  w.SetUint8("u8", 200);
  w.SetInt8("i8", -5);
  w.SetUint16("u16", 60000);
  w.SetInt16("i16", -300);
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("i32", -7);
  w.SetUint64("u64", 1ull << 40);
  w.SetInt64("i64", -(1ll << 40));
  w.SetFloat32("f32", 1.5f);
  w.SetFloat64("f64", -2.25);
  w.SetBool("b", true);
  w.SetString("s", "héllo");
  const std::vector<std::string> strings = {"a", "", "▁x"};
  w.SetStringArray("as", strings);
  const std::vector<float> floats = {0.5f, -1.0f};
  w.SetFloat32Array("af", floats);
  const std::vector<int32_t> ints = {1, -2, 3};
  w.SetInt32Array("ai", ints);
  const bool bools[] = {true, false};
  w.SetBoolArray("ab", bools);
  absl::StatusOr<std::string> bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Cursor c(*bytes);
  EXPECT_EQ(bytes->substr(0, 4), "GGUF");
  c.Pod<uint32_t>();
  EXPECT_EQ(c.Pod<uint32_t>(), 3u);
  EXPECT_EQ(c.Pod<uint64_t>(), 0u);   // tensors
  EXPECT_EQ(c.Pod<uint64_t>(), 17u);  // 16 set + general.alignment
  auto key = [&](const char* k, uint32_t type) {
    EXPECT_EQ(c.Str(), k);
    EXPECT_EQ(c.Pod<uint32_t>(), type) << k;
  };
  key("u8", 0);
  EXPECT_EQ(c.Pod<uint8_t>(), 200);
  key("i8", 1);
  EXPECT_EQ(c.Pod<int8_t>(), -5);
  key("u16", 2);
  EXPECT_EQ(c.Pod<uint16_t>(), 60000);
  key("i16", 3);
  EXPECT_EQ(c.Pod<int16_t>(), -300);
  key("u32", 4);
  EXPECT_EQ(c.Pod<uint32_t>(), 4000000000u);
  key("i32", 5);
  EXPECT_EQ(c.Pod<int32_t>(), -7);
  key("u64", 10);
  EXPECT_EQ(c.Pod<uint64_t>(), 1ull << 40);
  key("i64", 11);
  EXPECT_EQ(c.Pod<int64_t>(), -(1ll << 40));
  key("f32", 6);
  EXPECT_EQ(c.Pod<float>(), 1.5f);
  key("f64", 12);
  EXPECT_EQ(c.Pod<double>(), -2.25);
  key("b", 7);
  EXPECT_EQ(c.Pod<uint8_t>(), 1);
  key("s", 8);
  EXPECT_EQ(c.Str(), "héllo");
  key("as", 9);
  EXPECT_EQ(c.Pod<uint32_t>(), 8u);
  ASSERT_EQ(c.Pod<uint64_t>(), 3u);
  EXPECT_EQ(c.Str(), "a");
  EXPECT_EQ(c.Str(), "");
  EXPECT_EQ(c.Str(), "▁x");
  key("af", 9);
  EXPECT_EQ(c.Pod<uint32_t>(), 6u);
  ASSERT_EQ(c.Pod<uint64_t>(), 2u);
  EXPECT_EQ(c.Pod<float>(), 0.5f);
  EXPECT_EQ(c.Pod<float>(), -1.0f);
  key("ai", 9);
  EXPECT_EQ(c.Pod<uint32_t>(), 5u);
  ASSERT_EQ(c.Pod<uint64_t>(), 3u);
  EXPECT_EQ(c.Pod<int32_t>(), 1);
  EXPECT_EQ(c.Pod<int32_t>(), -2);
  EXPECT_EQ(c.Pod<int32_t>(), 3);
  key("ab", 9);
  EXPECT_EQ(c.Pod<uint32_t>(), 7u);
  ASSERT_EQ(c.Pod<uint64_t>(), 2u);
  EXPECT_EQ(c.Pod<uint8_t>(), 1);
  EXPECT_EQ(c.Pod<uint8_t>(), 0);
  key("general.alignment", 4);
  EXPECT_EQ(c.Pod<uint32_t>(), 32u);
  // No tensors: only padding to the alignment follows.
  EXPECT_EQ(bytes->size() % 32, 0u);
  EXPECT_LT(bytes->size() - c.pos(), 32u);
}

TEST(GgufWriterTest, SettingAKeyAgainReplacesItInPlace) {
  GgufWriter w;
  w.SetUint32("a", 1);
  w.SetString("b", "x");
  w.SetFloat32("a", 2.0f);
  absl::StatusOr<std::string> bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Cursor c(*bytes);
  c.Pod<uint32_t>();
  c.Pod<uint32_t>();
  c.Pod<uint64_t>();
  EXPECT_EQ(c.Pod<uint64_t>(), 3u);
  EXPECT_EQ(c.Str(), "a");
  EXPECT_EQ(c.Pod<uint32_t>(), 6u);
  EXPECT_EQ(c.Pod<float>(), 2.0f);
  EXPECT_EQ(c.Str(), "b");
}

struct ReadTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  uint64_t offset;
};

TEST(GgufWriterTest, TensorsAreAlignedAndStreamedInOrder) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  const std::vector<uint8_t> a = Iota(3 * 5 * 4);  // f32 [3, 5]: 60 bytes, padded to 64
  ASSERT_TRUE(w.AddTensorBytes("a", DType::kF32, {5, 3}, a).ok());
  // bf16 [2, 7] streamed row by row through the sink.
  const std::vector<uint8_t> b = Iota(2 * 7 * 2);
  ASSERT_TRUE(w.AddTensor("b", DType::kBF16, {7, 2}, [&b](GgufByteSink& sink) {
                 for (int r = 0; r < 2; ++r) {
                   if (absl::Status s = sink.Append(b.data() + r * 14, 14); !s.ok()) return s;
                 }
                 return absl::OkStatus();
               }).ok());
  const std::vector<uint8_t> q = Iota(2 * 34);  // q8_0 [1, 64]: two blocks
  ASSERT_TRUE(w.AddTensorBytes("q", DType::kQ8_0, {64}, q).ok());
  const std::vector<uint8_t> h = Iota(4 * 2);  // f16 [4]
  ASSERT_TRUE(w.AddTensorBytes("h", DType::kF16, {4}, h).ok());
  absl::StatusOr<std::string> bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Cursor c(*bytes);
  c.Pod<uint32_t>();
  c.Pod<uint32_t>();
  ASSERT_EQ(c.Pod<uint64_t>(), 4u);
  ASSERT_EQ(c.Pod<uint64_t>(), 2u);
  EXPECT_EQ(c.Str(), "general.architecture");
  c.Pod<uint32_t>();
  EXPECT_EQ(c.Str(), "llama");
  EXPECT_EQ(c.Str(), "general.alignment");
  c.Pod<uint32_t>();
  EXPECT_EQ(c.Pod<uint32_t>(), 32u);
  std::vector<ReadTensor> infos;
  for (int i = 0; i < 4; ++i) {
    ReadTensor t;
    t.name = c.Str();
    const uint32_t n_dims = c.Pod<uint32_t>();
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(c.Pod<uint64_t>());
    t.type = c.Pod<uint32_t>();
    t.offset = c.Pod<uint64_t>();
    infos.push_back(t);
  }
  EXPECT_EQ(infos[0].name, "a");
  EXPECT_EQ(infos[0].dims, (std::vector<uint64_t>{5, 3}));
  EXPECT_EQ(infos[0].type, 0u);
  EXPECT_EQ(infos[0].offset, 0u);
  EXPECT_EQ(infos[1].type, 30u);
  EXPECT_EQ(infos[1].offset, 64u);
  EXPECT_EQ(infos[2].type, 8u);
  EXPECT_EQ(infos[2].offset, 96u);
  EXPECT_EQ(infos[3].type, 1u);
  EXPECT_EQ(infos[3].offset, 96u + 96u);
  const size_t data_start = (c.pos() + 31) / 32 * 32;
  EXPECT_EQ(bytes->size(), data_start + 192 + 32);
  auto at = [&](uint64_t off, size_t n) { return bytes->substr(data_start + off, n); };
  EXPECT_EQ(at(0, a.size()), std::string(a.begin(), a.end()));
  EXPECT_EQ(at(64, b.size()), std::string(b.begin(), b.end()));
  EXPECT_EQ(at(96, q.size()), std::string(q.begin(), q.end()));
  EXPECT_EQ(at(192, h.size()), std::string(h.begin(), h.end()));
  // Padding is zeros.
  EXPECT_EQ(at(60, 4), std::string(4, '\0'));
  EXPECT_EQ(at(192 + 8, 24), std::string(24, '\0'));
}

TEST(GgufWriterTest, RejectsBadTensorDeclarations) {
  GgufWriter w;
  const std::vector<uint8_t> four = Iota(4);
  EXPECT_FALSE(w.AddTensorBytes("", DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kF32, {}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kF32, {1, 1, 1, 1, 1}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kF32, {0, 3}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kQ8_0, {16}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kF32, {1ull << 62, 1ull << 62}, four).ok());
  EXPECT_TRUE(w.AddTensorBytes("x", DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.AddTensorBytes("x", DType::kF32, {1}, four).ok());  // duplicate
}

TEST(GgufWriterTest, ProducerWritingTheWrongSizeFails) {
  {
    GgufWriter w;
    const std::vector<uint8_t> three = Iota(3);
    ASSERT_TRUE(w.AddTensorBytes("short", DType::kF32, {1}, three).ok());
    absl::StatusOr<std::string> r = w.WriteToString();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    const std::vector<uint8_t> eight = Iota(8);
    ASSERT_TRUE(w.AddTensorBytes("long", DType::kF32, {1}, eight).ok());
    absl::StatusOr<std::string> r = w.WriteToString();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("err", DType::kF32, {1}, [](GgufByteSink&) {
                   return absl::DataLossError("boom");
                 }).ok());
    EXPECT_EQ(w.WriteToString().status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(GgufWriterTest, AlignmentMustBeConsistent) {
  GgufWriter bad_alignment(24);
  EXPECT_FALSE(bad_alignment.WriteToString().ok());
  GgufWriter mismatch(64);
  mismatch.SetUint32("general.alignment", 32);
  EXPECT_FALSE(mismatch.WriteToString().ok());
  GgufWriter match(64);
  match.SetUint32("general.alignment", 64);
  const std::vector<uint8_t> four = Iota(4);
  ASSERT_TRUE(match.AddTensorBytes("t", DType::kF32, {1}, four).ok());
  absl::StatusOr<std::string> bytes = match.WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size() % 64, 0u);
}

TEST(GgufWriterTest, WritesFilesAndRemovesThemOnFailure) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gguf_writer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.gguf").string();
  {
    GgufWriter w;
    w.SetString("k", "v");
    const std::vector<uint8_t> four = Iota(4);
    ASSERT_TRUE(w.AddTensorBytes("t", DType::kF32, {1}, four).ok());
    GgufWriter same;
    same.SetString("k", "v");
    ASSERT_TRUE(same.AddTensorBytes("t", DType::kF32, {1}, four).ok());
    ASSERT_TRUE(w.WriteToFile(good).ok());
    std::ifstream in(good, std::ios::binary);
    const std::string on_disk((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    EXPECT_EQ(on_disk, same.WriteToString().value());
  }
  const std::string bad = (dir / "bad.gguf").string();
  {
    GgufWriter w;
    const std::vector<uint8_t> three = Iota(3);
    ASSERT_TRUE(w.AddTensorBytes("t", DType::kF32, {1}, three).ok());
    EXPECT_FALSE(w.WriteToFile(bad).ok());
    EXPECT_FALSE(std::filesystem::exists(bad));
  }
  EXPECT_EQ(GgufWriter().WriteToFile((dir / "no" / "such" / "dir.gguf").string()).code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// Round trip through the project's GGUF reader.
TEST(GgufWriterTest, RoundTripsThroughTheReader) {
  GgufWriter w;
  w.SetUint8("u8", 200);
  w.SetInt16("i16", -300);
  w.SetUint32("u32", 4000000000u);
  w.SetInt64("i64", -(1ll << 40));
  w.SetFloat32("f32", 1.5f);
  w.SetFloat64("f64", -2.25);
  w.SetBool("b", true);
  w.SetString("s", "h\xc3\xa9llo");
  const std::vector<std::string> strings = {"a", "", "\xe2\x96\x81x"};
  w.SetStringArray("as", strings);
  const std::vector<float> floats = {0.5f, -1.0f};
  w.SetFloat32Array("af", floats);
  const std::vector<int32_t> ints = {1, -2, 3};
  w.SetInt32Array("ai", ints);
  const std::vector<uint8_t> f32 = Iota(3 * 5 * 4);
  ASSERT_TRUE(w.AddTensorBytes("m.f32", DType::kF32, {5, 3}, f32).ok());
  const std::vector<uint8_t> bf16 = Iota(2 * 7 * 2);
  ASSERT_TRUE(w.AddTensorBytes("m.bf16", DType::kBF16, {7, 2}, bf16).ok());
  const std::vector<uint8_t> q8 = Iota(4 * 34);
  ASSERT_TRUE(w.AddTensorBytes("m.q8_0", DType::kQ8_0, {64, 2}, q8).ok());
  const std::vector<uint8_t> f16 = Iota(6 * 2);
  ASSERT_TRUE(w.AddTensorBytes("v.f16", DType::kF16, {6}, f16).ok());
  absl::StatusOr<std::string> bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  // The parser wants 4-byte aligned input: copy into a vector of u32.
  std::vector<uint32_t> aligned((bytes->size() + 3) / 4);
  std::memcpy(aligned.data(), bytes->data(), bytes->size());
  absl::StatusOr<GgufFile> f = ParseGguf(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(aligned.data()), bytes->size()));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(f->alignment, 32u);
  EXPECT_EQ(f->FindMetadata("u8")->AsInt(), 200);
  EXPECT_EQ(f->FindMetadata("i16")->AsInt(), -300);
  EXPECT_EQ(f->FindMetadata("u32")->AsInt(), 4000000000ll);
  EXPECT_EQ(f->FindMetadata("i64")->AsInt(), -(1ll << 40));
  EXPECT_EQ(f->FindMetadata("f32")->AsFloat(), 1.5);
  EXPECT_EQ(f->FindMetadata("f64")->AsFloat(), -2.25);
  EXPECT_EQ(f->FindMetadata("b")->AsBool(), true);
  EXPECT_EQ(f->FindMetadata("s")->AsString(), "h\xc3\xa9llo");
  const GgufValue* as = f->FindMetadata("as");
  ASSERT_NE(as, nullptr);
  ASSERT_EQ(as->size(), 3u);
  EXPECT_EQ(as->StringAt(0), "a");
  EXPECT_EQ(as->StringAt(1), "");
  EXPECT_EQ(as->StringAt(2), "\xe2\x96\x81x");
  EXPECT_EQ(f->FindMetadata("af")->FloatAt(1), -1.0);
  EXPECT_EQ(f->FindMetadata("ai")->IntAt(1), -2);
  EXPECT_EQ(f->FindMetadata("general.alignment")->AsInt(), 32);

  struct Expect {
    const char* name;
    DType dtype;
    int64_t rows, cols;
    const std::vector<uint8_t>* bytes;
  };
  for (const Expect& e :
       {Expect{"m.f32", DType::kF32, 3, 5, &f32}, Expect{"m.bf16", DType::kBF16, 2, 7, &bf16},
        Expect{"m.q8_0", DType::kQ8_0, 2, 64, &q8}, Expect{"v.f16", DType::kF16, 1, 6, &f16}}) {
    const GgufTensorInfo* t = f->FindTensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dtype, e.dtype) << e.name;
    EXPECT_EQ(t->rows(), e.rows) << e.name;
    EXPECT_EQ(t->cols(), e.cols) << e.name;
    ASSERT_EQ(t->size_bytes, e.bytes->size()) << e.name;
    EXPECT_EQ(std::memcmp(t->data, e.bytes->data(), e.bytes->size()), 0) << e.name;
    const auto* base = reinterpret_cast<const uint8_t*>(aligned.data());
    EXPECT_EQ(static_cast<size_t>(t->data - base) % 32, 0u) << e.name;
  }
}

}  // namespace
}  // namespace kvserve::model
