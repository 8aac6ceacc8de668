#include "model/gguf_llama.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/testing/gguf_builder.h"

namespace kvserve::model {
namespace {

using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::MakeTinyLlamaGguf;
using S = testing::TinyLlamaShape;

// Parses `bytes` (kept alive by the caller) and maps it to a Model.
absl::StatusOr<std::unique_ptr<Model>> Build(const std::vector<uint8_t>& bytes) {
  absl::StatusOr<GgufFile> f = ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
  if (!f.ok()) return f.status();
  return ModelFromGguf(*f, nullptr);
}

void ExpectError(const GgufBuilder& b, const std::string& substr) {
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
  ASSERT_FALSE(m.ok()) << "expected an error containing: " << substr;
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(substr));
}

TEST(GgufLlamaTest, MapsTinyLlama) {
  GgufBuilder b = MakeTinyLlamaGguf();
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, S::kDim);
  EXPECT_EQ(c.n_layers, S::kLayers);
  EXPECT_EQ(c.n_heads, S::kHeads);
  EXPECT_EQ(c.n_kv_heads, S::kKvHeads);
  EXPECT_EQ(c.head_dim, S::kHeadDim);
  EXPECT_EQ(c.ffn_dim, S::kFfn);
  EXPECT_EQ(c.vocab_size, S::kVocab);
  EXPECT_EQ(c.context_length, S::kContext);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  EXPECT_EQ(c.rope_dim, S::kHeadDim);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_TRUE(c.tied_embeddings);

  const ModelWeights& w = (*m)->weights();
  EXPECT_EQ(w.output.data, w.token_embedding.data);
  EXPECT_EQ(w.token_embedding.rows, S::kVocab);
  EXPECT_EQ(w.token_embedding.cols, S::kDim);
  const TensorView& down = w.layers[1].w_down;  // GGUF ne = [ffn, dim]
  EXPECT_EQ(down.rows, S::kDim);
  EXPECT_EQ(down.cols, S::kFfn);
  const std::vector<uint8_t>& want = b.FindTensor("blk.1.ffn_down.weight")->data;
  EXPECT_EQ(std::memcmp(down.data, want.data(), want.size()), 0);

  const Vocabulary& v = (*m)->vocab();
  EXPECT_EQ(v.pieces, (std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x41>",
                                                "\xe2\x96\x81"
                                                "a",
                                                "b"}));
  EXPECT_EQ(v.scores, (std::vector<float>{0, 0, 0, 0, -1, -2}));
  EXPECT_EQ(v.kinds,
            (std::vector<TokenKind>{TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl,
                                    TokenKind::kByte, TokenKind::kNormal, TokenKind::kNormal}));
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
}

TEST(GgufLlamaTest, UntiedWhenOutputPresent) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.AddF32Tensor("output.weight", {S::kDim, S::kVocab},
                 testing::TestValues(S::kDim * S::kVocab, 9));
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->config().tied_embeddings);
  EXPECT_NE((*m)->weights().output.data, (*m)->weights().token_embedding.data);
}

TEST(GgufLlamaTest, DefaultsAndOverrides) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.Remove("llama.rope.dimension_count").Remove("tokenizer.ggml.token_type");
  b.Remove("tokenizer.ggml.bos_token_id").Remove("tokenizer.ggml.eos_token_id");
  b.SetF32("llama.rope.freq_base", 500000.0f).SetBool("tokenizer.ggml.add_bos_token", false);
  b.SetBool("tokenizer.ggml.add_space_prefix", false);
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().rope_dim, S::kHeadDim);
  EXPECT_FLOAT_EQ((*m)->config().rope_base, 500000.0f);
  EXPECT_EQ((*m)->vocab().kinds[0], TokenKind::kNormal);
  EXPECT_EQ((*m)->vocab().bos_id, 1);
  EXPECT_EQ((*m)->vocab().eos_id, 2);
  EXPECT_FALSE((*m)->vocab().add_bos);
  EXPECT_FALSE((*m)->vocab().add_space_prefix);

  // head_count_kv defaults to head_count (then attn_k has the wrong shape for it).
  GgufBuilder mha = MakeTinyLlamaGguf();
  mha.Remove("llama.attention.head_count_kv");
  const std::vector<uint8_t> mha_bytes = mha.Build();
  absl::StatusOr<GgufFile> f = ParseGguf(mha_bytes);
  ASSERT_TRUE(f.ok());
  absl::StatusOr<ModelConfig> c = LlamaConfigFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, S::kHeads);
}

TEST(GgufLlamaTest, MissingMetadata) {
  ExpectError(MakeTinyLlamaGguf().Remove("llama.embedding_length"),
              "missing metadata key llama.embedding_length");
  ExpectError(MakeTinyLlamaGguf().Remove("llama.attention.layer_norm_rms_epsilon"),
              "missing metadata key llama.attention.layer_norm_rms_epsilon");
  ExpectError(MakeTinyLlamaGguf().Remove("general.architecture"),
              "missing metadata key general.architecture");
  ExpectError(MakeTinyLlamaGguf().Remove("tokenizer.ggml.tokens"),
              "missing metadata key tokenizer.ggml.tokens");
  ExpectError(MakeTinyLlamaGguf().Remove("tokenizer.ggml.model"),
              "missing metadata key tokenizer.ggml.model");
}

TEST(GgufLlamaTest, WrongMetadataType) {
  ExpectError(MakeTinyLlamaGguf().SetString("llama.embedding_length", "8"),
              "metadata key llama.embedding_length has type string, expected an integer");
  ExpectError(
      MakeTinyLlamaGguf().SetU32("llama.attention.layer_norm_rms_epsilon", 1),
      "metadata key llama.attention.layer_norm_rms_epsilon has type uint32, expected a float");
  ExpectError(MakeTinyLlamaGguf().SetU32("general.architecture", 1),
              "metadata key general.architecture has type uint32, expected string");
  ExpectError(MakeTinyLlamaGguf().SetU32("tokenizer.ggml.add_bos_token", 1),
              "metadata key tokenizer.ggml.add_bos_token has type uint32, expected bool");
  ExpectError(MakeTinyLlamaGguf().SetF32Array("tokenizer.ggml.tokens", {1, 2, 3, 4, 5, 6}),
              "metadata key tokenizer.ggml.tokens has type array of float32, expected array of "
              "string");
  ExpectError(MakeTinyLlamaGguf().SetStringArray("tokenizer.ggml.scores", {"a"}),
              "metadata key tokenizer.ggml.scores has type array of string");
  ExpectError(MakeTinyLlamaGguf().SetRaw("llama.block_count", 10, {0, 0, 0, 0, 1, 0, 0, 0}),
              "metadata key llama.block_count = 4294967296 is out of range");
}

TEST(GgufLlamaTest, InconsistentVocabulary) {
  ExpectError(MakeTinyLlamaGguf().SetF32Array("tokenizer.ggml.scores", {0, 0, 0}),
              "metadata key tokenizer.ggml.scores has 3 entries, tokenizer.ggml.tokens has 6");
  ExpectError(MakeTinyLlamaGguf().SetI32Array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 9}),
              "tokenizer.ggml.token_type[5] is not a valid token type");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.vocab_size", 7),
              "llama.vocab_size 7 differs from the 6 entries of tokenizer.ggml.tokens");
  ExpectError(MakeTinyLlamaGguf().SetU32("tokenizer.ggml.bos_token_id", 6),
              "bos token id 6 is out of range");
  ExpectError(MakeTinyLlamaGguf().SetString("tokenizer.ggml.model", "bert"),
              "tokenizer model \"bert\" is not supported");
  ExpectError(MakeTinyLlamaGguf().SetString("tokenizer.ggml.model", "gpt2"),
              "missing metadata key tokenizer.ggml.merges");
  ExpectError(MakeTinyLlamaGguf()
                  .SetString("tokenizer.ggml.model", "gpt2")
                  .SetString("tokenizer.ggml.pre", "brand-new-pre"),
              "unknown pre-tokenizer \"brand-new-pre\"");
}

TEST(GgufLlamaTest, UnsupportedArchitecture) {
  ExpectError(MakeTinyLlamaGguf().SetString("general.architecture", "gemma2"),
              "architecture \"gemma2\" is not supported (supported: llama, qwen2, qwen3, qwen3moe, "
              "deepseek2)");
}

TEST(GgufLlamaTest, ShapeMismatchAndMissingTensor) {
  GgufBuilder b = MakeTinyLlamaGguf();
  b.FindTensor("blk.1.attn_k.weight")->ne = {S::kDim / 2, S::kKvDim * 2};
  ExpectError(b, "tensor blk.1.attn_k.weight has shape [8, 4], expected [4, 8]");
  ExpectError(MakeTinyLlamaGguf().RemoveTensor("blk.1.ffn_up.weight"),
              "tensor blk.1.ffn_up.weight is missing");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.embedding_length", 16),
              "tensor token_embd.weight has shape [6, 8], expected [6, 16]");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.attention.head_count", 3),
              "llama.embedding_length 8 is not a multiple of head_count 3");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.block_count", 0), "n_layers must be positive");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.attention.key_length", 8),
              "tensor blk.0.attn_q.weight has shape [8, 8], expected [16, 8]");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.attention.key_length", 1 << 16),
              "n_heads * head_dim exceeds the supported maximum");
  ExpectError(MakeTinyLlamaGguf().SetU32("llama.attention.value_length", 3),
              "llama.attention.value_length 3 differs from the key length 4");
}

TEST(GgufLlamaTest, NormWeightsMustBeF32) {
  GgufBuilder b = MakeTinyLlamaGguf();
  GgufBuilder::Tensor* norm = b.FindTensor("blk.0.ffn_norm.weight");
  norm->ggml_type = kGgmlTypeF16;
  norm->data.resize(norm->data.size() / 2);
  ExpectError(b, "tensor blk.0.ffn_norm.weight must be f32, is f16");
}

TEST(GgufLlamaTest, MapsHalfPrecisionMatrices) {
  GgufBuilder b = MakeTinyLlamaGguf();
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_gate.weight"}) {
    GgufBuilder::Tensor* t = b.FindTensor(name);
    t->ggml_type = name[4] == '0' ? kGgmlTypeF16 : kGgmlTypeBF16;
    t->data.resize(t->data.size() / 2);
  }
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->weights().layers[0].wq.type, DType::kF16);
  EXPECT_EQ((*m)->weights().layers[1].w_gate.type, DType::kBF16);
  EXPECT_EQ((*m)->weights().layers[1].w_gate.rows, S::kFfn);
}

TEST(GgufLlamaTest, Stories260KGguf) {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "KVSERVE_MODELS_DIR is not set";
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(std::string(dir) + "/stories260K.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.ffn_dim, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.context_length, 2048);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_FALSE(c.tied_embeddings);  // this file stores output.weight (a copy of token_embd)
  const Vocabulary& v = (*m)->vocab();
  EXPECT_EQ(v.size(), 512);
  EXPECT_EQ(v.pieces[1], "<s>");
  EXPECT_EQ(v.pieces[259], "\xe2\x96\x81t");
  EXPECT_EQ(v.kinds[3], TokenKind::kByte);
  EXPECT_EQ(v.kinds[2], TokenKind::kControl);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
}

// The fuzzer's seed corpus (model/fuzz/gguf_corpus) holds valid models built here.
// Run with KVSERVE_WRITE_GGUF_CORPUS=1 to rewrite them after changing the builder.
std::vector<std::pair<std::string, std::vector<uint8_t>>> SeedFiles() {
  GgufBuilder half = MakeTinyLlamaGguf();
  half.SetVersion(2).SetU32("general.alignment", 64).SetLayoutAlignment(64);
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_gate.weight"}) {
    GgufBuilder::Tensor* t = half.FindTensor(name);
    t->ggml_type = name[4] == '0' ? kGgmlTypeF16 : kGgmlTypeBF16;
    t->data.resize(t->data.size() / 2);
  }
  half.AddF32Tensor("output.weight", {S::kDim, S::kVocab},
                    testing::TestValues(S::kDim * S::kVocab, 7));
  return {{"tiny_llama_v3_f32.gguf", MakeTinyLlamaGguf().Build()},
          {"tiny_llama_v2_half_untied.gguf", half.Build()}};
}

TEST(GgufLlamaTest, SeedCorpusIsValidAndCurrent) {
  const char* src = std::getenv("KVSERVE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "KVSERVE_SOURCE_DIR is not set";
  const std::filesystem::path dir = std::filesystem::path(src) / "model/fuzz/gguf_corpus";
  const bool write = std::getenv("KVSERVE_WRITE_GGUF_CORPUS") != nullptr;
  for (const auto& [name, bytes] : SeedFiles()) {
    SCOPED_TRACE(name);
    EXPECT_LT(bytes.size(), 10000u);
    absl::StatusOr<std::unique_ptr<Model>> m = Build(bytes);
    EXPECT_TRUE(m.ok()) << m.status();
    if (write) {
      std::ofstream(dir / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    std::ifstream in(dir / name, std::ios::binary);
    const std::vector<uint8_t> stored((std::istreambuf_iterator<char>(in)),
                                      std::istreambuf_iterator<char>());
    EXPECT_EQ(stored, bytes) << "seed file is stale; rerun with KVSERVE_WRITE_GGUF_CORPUS=1";
  }
}

}  // namespace
}  // namespace kvserve::model
