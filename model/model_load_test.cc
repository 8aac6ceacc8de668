// Model::Load: format detection, tokenizer lookup and file-level errors.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/mapped_file.h"
#include "model/model.h"
#include "model/testing/gguf_builder.h"

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string ModelsDir() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return dir == nullptr ? "" : dir;
}

// A fresh directory per test under gtest's temp dir.
fs::path TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / (std::string("kvserve_model_load_") +
                                                   info->name() + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void ExpectError(const absl::StatusOr<std::unique_ptr<Model>>& m, absl::StatusCode code,
                 const std::vector<std::string>& substrs) {
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), code) << m.status();
  for (const std::string& s : substrs) {
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(s));
  }
}

TEST(ModelLoadTest, MissingFileIsNotFound) {
  const std::string path = (TestDir() / "absent.gguf").string();
  ExpectError(Model::Load(path), absl::StatusCode::kNotFound, {path});
}

TEST(ModelLoadTest, DirectoryIsInvalid) {
  const std::string path = TestDir().string();
  ExpectError(Model::Load(path), absl::StatusCode::kInvalidArgument, {path, "not a regular file"});
}

TEST(ModelLoadTest, LoadsGgufFromDisk) {
  const fs::path p = TestDir() / "tiny.gguf";
  WriteFile(p, testing::MakeTinyLlamaGguf().Build());
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(p.string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().dim, testing::TinyLlamaShape::kDim);
  ExpectError(Model::Load(p.string(), "tok.bin"), absl::StatusCode::kInvalidArgument,
              {p.string(), "carries its own tokenizer"});
}

TEST(ModelLoadTest, MalformedGgufNamesFileAndProblem) {
  const fs::path p = TestDir() / "broken.gguf";
  testing::GgufBuilder b = testing::MakeTinyLlamaGguf();
  b.FindTensor("blk.1.attn_v.weight")->offset_override = 1 << 24;
  WriteFile(p, b.Build());
  ExpectError(Model::Load(p.string()), absl::StatusCode::kInvalidArgument,
              {p.string() + ": tensor blk.1.attn_v.weight", "extends past end of file"});
  WriteFile(p, testing::MakeTinyLlamaGguf().Remove("llama.block_count").Build());
  ExpectError(Model::Load(p.string()), absl::StatusCode::kInvalidArgument,
              {p.string() + ": missing metadata key llama.block_count"});
}

TEST(ModelLoadTest, GarbageIsNeitherFormat) {
  const fs::path p = TestDir() / "garbage.bin";
  WriteFile(p, std::vector<uint8_t>(100, 0xab));
  ExpectError(Model::Load(p.string()), absl::StatusCode::kInvalidArgument,
              {p.string(), "not a GGUF file, and not a llama2.c checkpoint"});
  WriteFile(p, {});
  ExpectError(Model::Load(p.string()), absl::StatusCode::kInvalidArgument,
              {p.string(), "file ends inside the 28-byte header"});
}

TEST(ModelLoadTest, Llama2cFindsSiblingTokenizer) {
  const std::string models = ModelsDir();
  ASSERT_FALSE(models.empty()) << "KVSERVE_MODELS_DIR is not set";
  // tok512.bin sits beside stories260K.bin in the models folder.
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(models + "/stories260K.bin");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->vocab().size(), 512);

  // Alone in a directory, the checkpoint has no tokenizer.
  const fs::path dir = TestDir();
  fs::copy_file(models + "/stories260K.bin", dir / "stories260K.bin");
  ExpectError(Model::Load((dir / "stories260K.bin").string()), absl::StatusCode::kNotFound,
              {"stories260K.bin", "tokenizer.bin or tok512.bin"});
  ExpectError(Model::Load((dir / "stories260K.bin").string(), (dir / "nope.bin").string()),
              absl::StatusCode::kNotFound, {"nope.bin"});
  // A tokenizer for another vocabulary size.
  WriteFile(dir / "tokenizer.bin", {8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'a'});
  ExpectError(Model::Load((dir / "stories260K.bin").string()), absl::StatusCode::kInvalidArgument,
              {"tokenizer.bin: llama2.c tokenizer"});
}

// Both residencies hold the same bytes; huge pages are 2 MiB aligned; the errors agree.
TEST(MappedFileTest, HugePagesHoldTheSameBytesAsTheMapping) {
  const fs::path dir = TestDir();
  std::mt19937 rng(5);
  // 0 bytes, less than a page, and more than one 2 MiB page with a ragged end.
  for (size_t size : {size_t{0}, size_t{100}, (size_t{5} << 20) + 12345}) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> bytes(size);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    const fs::path p = dir / std::to_string(size);
    WriteFile(p, bytes);
    absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(p.string());
    absl::StatusOr<std::unique_ptr<MappedFile>> huge =
        MappedFile::Open(p.string(), FileResidency::kHugePages);
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    ASSERT_TRUE(huge.ok()) << huge.status();
    EXPECT_EQ((*huge)->residency(), FileResidency::kHugePages);
    ASSERT_EQ((*huge)->bytes().size(), size);
    ASSERT_EQ((*mapped)->bytes().size(), size);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), (*huge)->bytes().begin()));
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), (*mapped)->bytes().begin()));
    if (size > 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*huge)->bytes().data()) % (size_t{2} << 20), 0u);
    }
  }
  for (FileResidency r : {FileResidency::kMapped, FileResidency::kHugePages}) {
    EXPECT_EQ(MappedFile::Open((dir / "absent").string(), r).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(MappedFile::Open(dir.string(), r).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(ModelLoadTest, HugePagesAndMappingLoadTheSameModel) {
  const std::string models = ModelsDir();
  ASSERT_FALSE(models.empty()) << "KVSERVE_MODELS_DIR is not set";
  for (const std::string name : {"stories260K.gguf", "stories260K.bin"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Model>> mapped =
        Model::Load(models + "/" + name, "", LoadOptions{.huge_pages = false});
    absl::StatusOr<std::unique_ptr<Model>> huge =
        Model::Load(models + "/" + name, "", LoadOptions{.huge_pages = true});
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    ASSERT_TRUE(huge.ok()) << huge.status();
    // The fingerprint covers every weight byte, the config and the vocabulary.
    EXPECT_EQ((*huge)->fingerprint(), (*mapped)->fingerprint());
  }
}

}  // namespace
}  // namespace kvserve::model
