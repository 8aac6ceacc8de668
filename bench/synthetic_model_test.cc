#include "bench/synthetic_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::bench {
namespace {

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("synthetic_model_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

float FirstFloat(const model::TensorView& t) {
  float f = 0.0f;
  std::memcpy(&f, t.data, sizeof(f));
  return f;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(PresetConfigTest, EveryPresetIsValidAndUnknownIsNotFound) {
  for (const std::string& name : PresetNames()) {
    absl::StatusOr<model::ModelConfig> c = PresetConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c->Validate().ok()) << name;
  }
  absl::StatusOr<model::ModelConfig> tl1b = PresetConfig("tl1b");
  EXPECT_EQ(tl1b->dim, 2048);
  EXPECT_EQ(tl1b->n_kv_heads, 4);
  EXPECT_EQ(tl1b->ffn_dim, 5632);
  EXPECT_TRUE(PresetConfig("smol135m")->tied_embeddings);
  EXPECT_EQ(PresetConfig("smol135m")->vocab_size, 49152);
  EXPECT_EQ(PresetConfig("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SyntheticVocabularyTest, LayoutAndMergeability) {
  absl::StatusOr<model::Vocabulary> v = SyntheticVocabulary(49152);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 49152);
  EXPECT_EQ(v->pieces[0], "<unk>");
  EXPECT_EQ(v->kinds[0], model::TokenKind::kUnknown);
  EXPECT_EQ(v->pieces[1], "<s>");
  EXPECT_EQ(v->pieces[2], "</s>");
  EXPECT_EQ(v->kinds[2], model::TokenKind::kControl);
  EXPECT_EQ(v->pieces[3], "<0x00>");
  EXPECT_EQ(v->pieces[3 + 0x0a], "<0x0A>");
  EXPECT_EQ(v->pieces[258], "<0xFF>");
  EXPECT_EQ(v->kinds[258], model::TokenKind::kByte);
  std::set<std::string> seen;
  for (int i = 0; i < v->size(); ++i) {
    EXPECT_TRUE(seen.insert(v->pieces[i]).second) << "duplicate piece " << v->pieces[i];
    if (i < 259) continue;
    EXPECT_EQ(v->kinds[i], model::TokenKind::kNormal);
    if (i > 259) {
      EXPECT_LT(v->scores[i], v->scores[i - 1]);
    }
    // Every multi-character piece splits into two earlier pieces.
    const std::string& p = v->pieces[i];
    if (p == "\xe2\x96\x81" || p.size() == 1) continue;
    bool reachable = false;
    for (size_t cut = 1; cut < p.size() && !reachable; ++cut) {
      reachable = seen.count(p.substr(0, cut)) && seen.count(p.substr(cut));
    }
    EXPECT_TRUE(reachable) << p;
  }
  EXPECT_EQ(SyntheticVocabulary(259).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticVocabularyTest, TokenizerRoundTripsAndMerges) {
  absl::StatusOr<model::Vocabulary> v = SyntheticVocabulary(32000);
  ASSERT_TRUE(v.ok());
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tok = model::Tokenizer::Create(*v);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "the quick brown fox, Ünïcode & 42!";
  const std::vector<int32_t> ids = (*tok)->Encode(text, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ((*tok)->Decode(ids), text);
  // Lowercase words are pieces (with their leading "▁"): one token each.
  EXPECT_EQ((*tok)->Encode("the big fox", false).size(), 3u);
}

TEST(WriteSyntheticModelTest, LoadsBackWithTheSameShapeAndVocabulary) {
  TempDir dir;
  for (model::DType dtype : {model::DType::kF32, model::DType::kF16, model::DType::kBF16,
                             model::DType::kQ8_0, model::DType::kQ4_0}) {
    SCOPED_TRACE(std::string(model::DTypeName(dtype)));
    SyntheticModelOptions o;
    o.config = *PresetConfig("tiny");
    o.dtype = dtype;
    const std::string path = dir.File(std::string(model::DTypeName(dtype)) + ".gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::ModelConfig& c = (*m)->config();
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.ffn_dim, 128);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.context_length, 256);
    EXPECT_EQ(c.rope_dim, 16);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
    EXPECT_FALSE(c.tied_embeddings);
    const model::ModelWeights& w = (*m)->weights();
    EXPECT_EQ(w.layers[1].w_down.type, dtype);
    EXPECT_EQ(w.token_embedding.type, dtype);
    EXPECT_EQ(w.output_norm.type, model::DType::kF32);
    EXPECT_EQ(FirstFloat(w.layers[0].attn_norm), 1.0f);
    EXPECT_EQ((*m)->vocab().pieces, SyntheticVocabulary(512)->pieces);
    EXPECT_EQ((*m)->vocab().bos_id, 1);
    EXPECT_EQ((*m)->vocab().eos_id, 2);
  }
}

TEST(WriteSyntheticModelTest, WeightsAreSeededAndScaled) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("a.gguf")).ok());
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("b.gguf")).ok());
  o.seed = 2;
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("c.gguf")).ok());
  const std::string a = ReadAll(dir.File("a.gguf"));
  EXPECT_EQ(a, ReadAll(dir.File("b.gguf")));
  EXPECT_NE(a, ReadAll(dir.File("c.gguf")));
  EXPECT_EQ(a.size(), ReadAll(dir.File("c.gguf")).size());

  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(dir.File("a.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  // The embedding table is N(0, 0.02^2): check mean, standard deviation and bound.
  const model::TensorView& e = (*m)->weights().token_embedding;
  const auto* x = static_cast<const float*>(e.data);
  double sum = 0.0, sum_sq = 0.0, max_abs = 0.0;
  const int64_t n = e.elements();
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sum_sq += static_cast<double>(x[i]) * x[i];
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
  }
  const double mean = sum / n;
  const double sd = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.001);
  EXPECT_LE(max_abs, 0.02 * 3.5);
  // Layers differ from each other.
  const model::TensorView& q0 = (*m)->weights().layers[0].wq;
  const model::TensorView& q1 = (*m)->weights().layers[1].wq;
  EXPECT_NE(std::memcmp(q0.data, q1.data, q0.row_bytes()), 0);
}

TEST(WriteSyntheticModelTest, TiedEmbeddingsHaveNoOutputTensor) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  o.config.tied_embeddings = true;
  o.dtype = model::DType::kBF16;
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("tied.gguf")).ok());
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(dir.File("tied.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->config().tied_embeddings);
  EXPECT_EQ((*m)->weights().output.data, (*m)->weights().token_embedding.data);
  // The file is smaller than the untied one by the output matrix (512 x 64 bf16).
  o.config.tied_embeddings = false;
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("untied.gguf")).ok());
  // (plus its tensor descriptor and padding).
  const uintmax_t diff = std::filesystem::file_size(dir.File("untied.gguf")) -
                         std::filesystem::file_size(dir.File("tied.gguf"));
  EXPECT_GE(diff, 512u * 64u * 2u);
  EXPECT_LE(diff, 512u * 64u * 2u + 128u);
}

TEST(WriteSyntheticModelTest, ArchitecturesLoadBackWithTheirFeatures) {
  TempDir dir;
  for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    SyntheticModelOptions o;
    o.config = *PresetConfig("tiny");
    ASSERT_TRUE(ApplyArchitecture(arch, o.config).ok());
    if (std::string(arch) == "llama") {
      o.config.rope_freq_factors = Llama3RopeFactors(500000.0f, o.config.rope_dim, 8.0f);
      o.config.attention_qkv_bias = true;
      o.config.attention_output_bias = true;
    }
    o.config.rope_freq_scale = 0.5f;
    o.config.sliding_window = 32;
    const std::string path = dir.File(std::string(arch) + ".gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::ModelConfig& c = (*m)->config();
    EXPECT_EQ(c.architecture, arch);
    EXPECT_EQ(c.rope_style, o.config.rope_style);
    EXPECT_EQ(c.attention_qkv_bias, o.config.attention_qkv_bias);
    EXPECT_EQ(c.attention_output_bias, o.config.attention_output_bias);
    EXPECT_EQ(c.qk_norm, o.config.qk_norm);
    EXPECT_EQ(c.rope_freq_factors, o.config.rope_freq_factors);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.5f);
    EXPECT_EQ(c.sliding_window, 32);
    EXPECT_EQ(c.n_experts, o.config.n_experts);
    EXPECT_EQ(c.n_experts_used, o.config.n_experts_used);
    EXPECT_EQ(c.ffn_dim, 128);
  }
  model::ModelConfig c = *PresetConfig("tiny");
  EXPECT_EQ(ApplyArchitecture("gemma", c).code(), absl::StatusCode::kInvalidArgument);
  c.head_dim = 32;  // q_dim 128 != dim 64: llama.cpp's qwen2 cannot load it
  EXPECT_EQ(ApplyArchitecture("qwen2", c).code(), absl::StatusCode::kInvalidArgument);
  // A shape with experts is qwen3moe's only.
  model::ModelConfig moe = *PresetConfig("q3moe-mini");
  EXPECT_EQ(ApplyArchitecture("qwen3", moe).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ApplyArchitecture("qwen3moe", moe).ok());
  EXPECT_EQ(moe.n_experts, 128);
  EXPECT_EQ(moe.n_experts_used, 8);
}

// deepseek2 on the tiny preset: latent attention, layer 0 dense, then DeepSeek-V2's
// experts; with DeepSeek-V3's routing features too; all read back as written.
TEST(WriteSyntheticModelTest, Deepseek2ExpertsLoadBack) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  ASSERT_TRUE(ApplyArchitecture("deepseek2", o.config).ok());
  EXPECT_TRUE(o.config.mla());
  EXPECT_EQ(o.config.n_dense_layers, 1);
  EXPECT_EQ(o.config.dense_ffn_dim, 128);
  EXPECT_EQ(o.config.ffn_dim, 64);
  EXPECT_EQ(o.config.n_experts, kDefaultExperts);
  EXPECT_EQ(o.config.n_shared_experts, 2);
  for (bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "v3 routing" : "v2 routing");
    if (v3) {
      o.config.expert_gating = model::ExpertGating::kSigmoid;
      o.config.expert_probs_bias = true;
      o.config.n_expert_groups = 4;
      o.config.n_expert_groups_used = 2;
      o.config.expert_weights_norm = true;
      o.config.expert_weights_scale = 2.5f;
    }
    const std::string path = dir.File(v3 ? "v3.gguf" : "v2.gguf");
    const absl::Status written = WriteSyntheticModel(o, path);
    ASSERT_TRUE(written.ok()) << written;
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::ModelConfig& c = (*m)->config();
    EXPECT_EQ(c.n_experts, o.config.n_experts);
    EXPECT_EQ(c.n_experts_used, o.config.n_experts_used);
    EXPECT_EQ(c.ffn_dim, o.config.ffn_dim);
    EXPECT_EQ(c.n_dense_layers, 1);
    EXPECT_EQ(c.dense_ffn_dim, 128);
    EXPECT_EQ(c.n_shared_experts, o.config.n_shared_experts);
    EXPECT_EQ(c.expert_gating, o.config.expert_gating);
    EXPECT_EQ(c.expert_probs_bias, o.config.expert_probs_bias);
    EXPECT_EQ(c.n_expert_groups, o.config.n_expert_groups);
    EXPECT_EQ(c.n_expert_groups_used, o.config.n_expert_groups_used);
    EXPECT_EQ(c.expert_weights_norm, o.config.expert_weights_norm);
    EXPECT_FLOAT_EQ(c.expert_weights_scale, o.config.expert_weights_scale);
  }
  // DeepSeek-V2-Lite's shape (not written: 15.7 B parameters).
  const model::ModelConfig lite = *PresetConfig("deepseek-v2-lite");
  EXPECT_EQ(lite.n_layers, 27);
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.kv_dim(), 512 + 64);
  EXPECT_EQ(lite.n_experts, 64);
  EXPECT_EQ(lite.n_experts_used, 6);
  EXPECT_EQ(lite.shared_ffn_dim(), 2 * 1408);
  EXPECT_EQ(lite.DenseFfnDim(), 10944);
  EXPECT_TRUE(SyntheticVocabulary(lite.vocab_size).ok());
  model::ModelConfig kept = lite;
  ASSERT_TRUE(ApplyArchitecture("deepseek2", kept).ok());
  EXPECT_EQ(kept.n_experts, 64);
  EXPECT_EQ(ApplyArchitecture("qwen3moe", kept).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriteSyntheticModelTest, Qwen3MoeTensorsAndQ4_K_MMix) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  o.config.dim = o.config.ffn_dim = 256;  // whole q4_K blocks, q_dim included
  o.config.head_dim = o.config.rope_dim = 64;
  ASSERT_TRUE(ApplyArchitecture("qwen3moe", o.config).ok());
  o.mix = QuantMix::kQ4_K_M;
  const std::string path = dir.File("moe.gguf");
  const absl::Status written = WriteSyntheticModel(o, path);
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::LayerWeights& L = (*m)->weights().layers[0];
  EXPECT_EQ(L.router.type, model::DType::kF32);
  ASSERT_EQ(L.expert_gate.size(), static_cast<size_t>(kDefaultExperts));
  EXPECT_EQ(L.expert_gate[0].type, model::DType::kQ4_K);
  EXPECT_EQ(L.expert_down[0].type, model::DType::kQ4_K);
  // use_more_bits(1, 2) holds: q6_K, as for ffn_down.
  EXPECT_EQ((*m)->weights().layers[1].expert_down[0].type, model::DType::kQ6_K);
  EXPECT_EQ(L.w_gate.data, nullptr);
}

TEST(Llama3RopeFactorsTest, FollowsTheConverterCurve) {
  // Llama 3.1 8B: base 500000, head 128, factor 8: high frequencies unscaled, low ones
  // divided by 8, a smooth ramp between (convert_hf_to_gguf.py's formula).
  const std::vector<float> f = Llama3RopeFactors(500000.0f, 128, 8.0f);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f.front(), 1.0f);
  EXPECT_FLOAT_EQ(f.back(), 8.0f);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]) << i;
  EXPECT_TRUE(std::any_of(f.begin(), f.end(), [](float v) { return v > 1.0f && v < 8.0f; }));
  EXPECT_EQ(PresetConfig("l3-1b")->rope_freq_factors.size(), 32u);
}

TEST(WriteSyntheticModelTest, Q4_K_MMixGivesQ6_KToOutputAndSomeAttnVAndFfnDown) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  o.config.n_layers = 8;  // use_more_bits(i, 8): layers 0, 3, 6, 7
  o.config.dim = 256;
  o.config.head_dim = 64;
  o.config.rope_dim = 64;
  o.config.ffn_dim = 512;
  o.mix = QuantMix::kQ4_K_M;
  ASSERT_TRUE(WriteSyntheticModel(o, dir.File("m.gguf")).ok());
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(dir.File("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const model::ModelWeights& w = (*m)->weights();
  EXPECT_EQ(w.output.type, model::DType::kQ6_K);
  EXPECT_EQ(w.token_embedding.type, model::DType::kQ4_K);
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    const model::DType wide = more ? model::DType::kQ6_K : model::DType::kQ4_K;
    EXPECT_EQ(w.layers[l].wv.type, wide) << l;
    EXPECT_EQ(w.layers[l].w_down.type, wide) << l;
    EXPECT_EQ(w.layers[l].wq.type, model::DType::kQ4_K) << l;
    EXPECT_EQ(w.layers[l].w_up.type, model::DType::kQ4_K) << l;
  }
  // Tied: the embedding doubles as the output and gets its q6_K.
  o.config.tied_embeddings = true;
  EXPECT_EQ(MatrixDType(o, "token_embd", -1), model::DType::kQ6_K);
  // The tiny preset's 64-wide rows are not whole 256-element blocks.
  o.config = *PresetConfig("tiny");
  EXPECT_EQ(WriteSyntheticModel(o, dir.File("t.gguf")).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriteSyntheticModelTest, RejectsBadInput) {
  TempDir dir;
  SyntheticModelOptions o;
  o.config = *PresetConfig("tiny");
  o.config.n_heads = 0;
  EXPECT_EQ(WriteSyntheticModel(o, dir.File("x.gguf")).code(), absl::StatusCode::kInvalidArgument);
  o.config = *PresetConfig("tiny");
  o.config.dim = 48;  // head_dim 12; not a multiple of 32 for q8_0
  o.config.head_dim = 12;
  o.config.rope_dim = 12;
  o.dtype = model::DType::kQ8_0;
  EXPECT_EQ(WriteSyntheticModel(o, dir.File("y.gguf")).code(), absl::StatusCode::kInvalidArgument);
  SyntheticModelOptions fresh;
  fresh.config = *PresetConfig("tiny");
  EXPECT_FALSE(WriteSyntheticModel(fresh, dir.File("missing/dir/z.gguf")).ok());
}

}  // namespace
}  // namespace kvserve::bench
