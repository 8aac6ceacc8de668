#include "model/llama2c.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/testing/gguf_builder.h"

namespace kvserve::model {
namespace {

using testing::ByteWriter;
using ::testing::HasSubstr;

std::string ModelsDir() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return dir == nullptr ? "" : dir;
}

// A small checkpoint whose every float is its own index, so views can be located.
struct SmallCheckpoint {
  int dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 5, seq_len = 4;
  bool shared = true;

  std::vector<uint8_t> Build() const {
    ByteWriter w;
    for (int v : {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq_len}) {
      w.Put<int32_t>(v);
    }
    const int kv_dim = kv_heads * (dim / heads);
    const size_t floats = static_cast<size_t>(vocab) * dim * (shared ? 1 : 2) +
                          layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) +
                          dim + seq_len * (dim / heads);
    for (size_t i = 0; i < floats; ++i) w.Put<float>(static_cast<float>(i));
    return w.bytes();
  }
};

float At(const TensorView& t, int64_t r, int64_t c) {
  return reinterpret_cast<const float*>(t.row(r))[c];
}

TEST(Llama2cTest, ParsesStackedLayersInRunCOrder) {
  SmallCheckpoint s;
  s.shared = false;
  const std::vector<uint8_t> bytes = s.Build();
  absl::StatusOr<Llama2cCheckpoint> ck = ParseLlama2cCheckpoint(bytes);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const ModelConfig& c = ck->config;
  EXPECT_EQ(c.dim, 8);
  EXPECT_EQ(c.ffn_dim, 12);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rope_dim, 4);
  EXPECT_EQ(c.context_length, 4);
  EXPECT_EQ(c.vocab_size, 5);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);

  // Offsets in floats, following run.c's memory_map_weights.
  const int64_t D = 8, H = 12, L = 2, V = 5, KV = 4;
  const int64_t emb = 0, rms_att = V * D, wq = rms_att + L * D, wk = wq + L * D * D,
                wv = wk + L * KV * D, wo = wv + L * KV * D, rms_ffn = wo + L * D * D,
                w1 = rms_ffn + L * D, w2 = w1 + L * H * D, w3 = w2 + L * D * H,
                rms_final = w3 + L * H * D, wcls = rms_final + D + 4 * 4;
  const ModelWeights& w = ck->weights;
  EXPECT_EQ(At(w.token_embedding, 2, 3), emb + 2 * D + 3);
  EXPECT_EQ(At(w.output, 4, 7), wcls + 4 * D + 7);
  EXPECT_EQ(At(w.output_norm, 0, 5), rms_final + 5);
  const LayerWeights& l1 = w.layers[1];
  EXPECT_EQ(At(l1.attn_norm, 0, 2), rms_att + D + 2);
  EXPECT_EQ(At(l1.wq, 3, 1), wq + D * D + 3 * D + 1);
  EXPECT_EQ(At(l1.wk, 3, 1), wk + KV * D + 3 * D + 1);
  EXPECT_EQ(At(l1.wv, 0, 0), wv + KV * D);
  EXPECT_EQ(At(l1.wo, 7, 7), wo + D * D + 7 * D + 7);
  EXPECT_EQ(At(l1.ffn_norm, 0, 0), rms_ffn + D);
  EXPECT_EQ(At(l1.w_gate, 11, 0), w1 + H * D + 11 * D);
  EXPECT_EQ(At(l1.w_down, 7, 11), w2 + D * H + 7 * H + 11);
  EXPECT_EQ(At(l1.w_up, 0, 1), w3 + H * D + 1);
  EXPECT_EQ(l1.w_down.rows, D);
  EXPECT_EQ(l1.w_down.cols, H);
  EXPECT_EQ(l1.wk.rows, KV);

  // Shared classifier: output is the embedding table.
  SmallCheckpoint shared;
  const std::vector<uint8_t> shared_bytes = shared.Build();
  absl::StatusOr<Llama2cCheckpoint> ck2 = ParseLlama2cCheckpoint(shared_bytes);
  ASSERT_TRUE(ck2.ok()) << ck2.status();
  EXPECT_TRUE(ck2->config.tied_embeddings);
  EXPECT_EQ(ck2->weights.output.data, ck2->weights.token_embedding.data);
}

void ExpectCheckpointError(const std::vector<uint8_t>& bytes, const std::string& substr) {
  absl::StatusOr<Llama2cCheckpoint> ck = ParseLlama2cCheckpoint(bytes);
  ASSERT_FALSE(ck.ok()) << "expected: " << substr;
  EXPECT_EQ(ck.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr(substr));
}

TEST(Llama2cTest, RejectsBadCheckpoints) {
  const std::vector<uint8_t> good = SmallCheckpoint().Build();
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + n);
    absl::StatusOr<Llama2cCheckpoint> ck = ParseLlama2cCheckpoint(prefix);
    ASSERT_FALSE(ck.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(ck.status().code(), absl::StatusCode::kInvalidArgument);
  }
  ExpectCheckpointError({1, 2, 3}, "file ends inside the 28-byte header");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  ExpectCheckpointError(longer, "its header (dim 8, hidden_dim 12, n_layers 2");
  SmallCheckpoint s;
  s.heads = 3;
  ExpectCheckpointError(s.Build(), "dim 8 is not a positive multiple of n_heads 3");
  s = SmallCheckpoint();
  s.kv_heads = 0;
  ExpectCheckpointError(s.Build(), "n_kv_heads must be positive");
  std::vector<uint8_t> absurd = good;
  const int32_t layers = 1 << 30;  // rejected before any size arithmetic
  std::memcpy(absurd.data() + 8, &layers, 4);
  ExpectCheckpointError(absurd, "exceeds the supported maximum");
  ExpectCheckpointError({'a', 'k', '4', '2', 1, 0, 0, 0}, "\"ak42\" export format");
}

std::vector<uint8_t> TokenizerBytes(const std::vector<std::pair<std::string, float>>& tokens) {
  ByteWriter w;
  w.Put<int32_t>(8);
  for (const auto& [piece, score] : tokens) {
    w.Put<float>(score).Put<int32_t>(static_cast<int32_t>(piece.size()));
    w.bytes().insert(w.bytes().end(), piece.begin(), piece.end());
  }
  return w.bytes();
}

TEST(Llama2cTest, ConvertsTokenizerPieces) {
  const std::vector<uint8_t> bytes = TokenizerBytes(
      {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}, {"<0x0A>", 0}, {" the", -3}, {"<0x0a>", -4}});
  absl::StatusOr<Vocabulary> v = ParseLlama2cTokenizer(bytes, 6);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pieces, (std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x0A>",
                                                 "\xe2\x96\x81the", "<0x0a>"}));
  EXPECT_EQ(v->kinds,
            (std::vector<TokenKind>{TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl,
                                    TokenKind::kByte, TokenKind::kNormal, TokenKind::kNormal}));
  EXPECT_EQ(v->scores[4], -3.0f);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
}

TEST(Llama2cTest, RejectsBadTokenizers) {
  const std::vector<uint8_t> good = TokenizerBytes({{"<unk>", 0}, {"a", 0}, {"bc", 0}});
  ASSERT_TRUE(ParseLlama2cTokenizer(good, 3).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + n);
    ASSERT_FALSE(ParseLlama2cTokenizer(prefix, 3).ok()) << n;
  }
  absl::StatusOr<Vocabulary> v = ParseLlama2cTokenizer(good, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("bytes left after 2 tokens"));
  v = ParseLlama2cTokenizer(good, 1 << 30);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("too short for 1073741824 tokens"));
  std::vector<uint8_t> negative = good;
  const int32_t bad_len = -5;
  std::memcpy(negative.data() + 8, &bad_len, 4);  // length of token 0
  v = ParseLlama2cTokenizer(negative, 3);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("token 0 length -5"));
}

// The two stories260K files hold the same model: after loading, every tensor's bytes
// match (the GGUF's Q/K rows are in the same order as llama2.c's: both rotate adjacent
// pairs), and the vocabularies agree.
TEST(Llama2cTest, Stories260KBinMatchesGguf) {
  const std::string dir = ModelsDir();
  ASSERT_FALSE(dir.empty()) << "KVSERVE_MODELS_DIR is not set";
  absl::StatusOr<std::unique_ptr<Model>> bin =
      Model::Load(dir + "/stories260K.bin", dir + "/tok512.bin");
  ASSERT_TRUE(bin.ok()) << bin.status();
  absl::StatusOr<std::unique_ptr<Model>> gguf = Model::Load(dir + "/stories260K.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();

  const ModelConfig& a = (*bin)->config();
  const ModelConfig& b = (*gguf)->config();
  EXPECT_EQ(a.dim, 64);
  EXPECT_EQ(a.n_layers, 5);
  EXPECT_EQ(a.n_heads, 8);
  EXPECT_EQ(a.n_kv_heads, 4);
  EXPECT_EQ(a.ffn_dim, 172);
  EXPECT_EQ(a.vocab_size, 512);
  EXPECT_EQ(a.context_length, 512);  // llama2.c seq_len; the GGUF says 2048
  EXPECT_TRUE(a.tied_embeddings);
  for (auto [x, y] : {std::pair{a.dim, b.dim},
                      {a.n_layers, b.n_layers},
                      {a.n_heads, b.n_heads},
                      {a.n_kv_heads, b.n_kv_heads},
                      {a.head_dim, b.head_dim},
                      {a.ffn_dim, b.ffn_dim},
                      {a.vocab_size, b.vocab_size},
                      {a.rope_dim, b.rope_dim}}) {
    EXPECT_EQ(x, y);
  }
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_base, b.rope_base);
  EXPECT_EQ(a.rope_style, b.rope_style);

  auto same = [](const char* what, const TensorView& x, const TensorView& y) {
    ASSERT_EQ(x.type, y.type) << what;
    ASSERT_EQ(x.rows, y.rows) << what;
    ASSERT_EQ(x.cols, y.cols) << what;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.rows * x.row_bytes()), 0) << what << " differs";
  };
  const ModelWeights& wa = (*bin)->weights();
  const ModelWeights& wb = (*gguf)->weights();
  same("token_embd", wa.token_embedding, wb.token_embedding);
  same("output_norm", wa.output_norm, wb.output_norm);
  same("output", wa.output, wb.output);
  for (int l = 0; l < a.n_layers; ++l) {
    SCOPED_TRACE(l);
    const LayerWeights& la = wa.layers[l];
    const LayerWeights& lb = wb.layers[l];
    same("attn_norm", la.attn_norm, lb.attn_norm);
    same("wq", la.wq, lb.wq);
    same("wk", la.wk, lb.wk);
    same("wv", la.wv, lb.wv);
    same("wo", la.wo, lb.wo);
    same("ffn_norm", la.ffn_norm, lb.ffn_norm);
    same("w_gate", la.w_gate, lb.w_gate);
    same("w_up", la.w_up, lb.w_up);
    same("w_down", la.w_down, lb.w_down);
  }

  const Vocabulary& va = (*bin)->vocab();
  const Vocabulary& vb = (*gguf)->vocab();
  EXPECT_EQ(va.pieces, vb.pieces);
  EXPECT_EQ(va.scores, vb.scores);
  EXPECT_EQ(va.kinds, vb.kinds);
  EXPECT_EQ(va.bos_id, vb.bos_id);
  EXPECT_EQ(va.eos_id, vb.eos_id);
  EXPECT_EQ(va.unk_id, vb.unk_id);
  EXPECT_EQ(va.add_bos, vb.add_bos);
  EXPECT_EQ(va.add_space_prefix, vb.add_space_prefix);
}

}  // namespace
}  // namespace kvserve::model
