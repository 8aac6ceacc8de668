// A bf16, q4_0 or q8_0 GGUF file loaded with model::LoadOptions::panels (as engine::LoadModel
// does for the cpu_blas backend on CPUs with AVX512-BF16, resp. AVX-512 VNNI): the same
// fingerprint and the same elements as a row-major load, the cpu_blas backend's logits bit for bit
// those it computes on its own packed copies of a row-major load (and near the reference's), the
// backends that cannot read panels refuse the model, and LoadModel packs exactly when the backend
// reads panels.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/cpu_blas/simd_kernels.h"
#include "backends/kv_arena.h"
#include "bench/synthetic_model.h"
#include "engine/model_loading.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/panels.h"

namespace kvserve {
namespace {

using model::DType;
using model::Layout;
using model::TensorView;

struct Param {
  DType dtype;  // kBF16, kQ4_0 or kQ8_0
  bool tied;    // tied embeddings
};

class PanelsLoadTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    absl::StatusOr<model::ModelConfig> config = bench::PresetConfig("tiny");
    ASSERT_TRUE(config.ok()) << config.status();
    config->tied_embeddings = GetParam().tied;
    bench::SyntheticModelOptions options;
    options.config = *config;
    options.dtype = GetParam().dtype;
    options.seed = 7;
    options.weight_std = 0.1f;
    path_ =
        (std::filesystem::temp_directory_path() / ("panels_" + std::to_string(::getpid()) + "_" +
                                                   std::string(model::DTypeName(GetParam().dtype)) +
                                                   (GetParam().tied ? "_tied" : "") + ".gguf"))
            .string();
    ASSERT_TRUE(bench::WriteSyntheticModel(options, path_).ok());
  }
  void TearDown() override { std::filesystem::remove(path_); }

  bool bf16() const { return GetParam().dtype == DType::kBF16; }
  // The panel types of this file's projections.
  model::PanelTypes Types() const {
    return {.bf16 = bf16(),
            .q4_0 = GetParam().dtype == DType::kQ4_0,
            .q8_0 = GetParam().dtype == DType::kQ8_0};
  }
  // The kernel level that reads this file's panels, and one below it.
  backends::cpu_blas::Isa Level() const {
    return bf16() ? backends::cpu_blas::Isa::kAvx512Bf16 : backends::cpu_blas::Isa::kAvx512Vnni;
  }
  backends::cpu_blas::Isa Lower() const {
    return bf16() ? backends::cpu_blas::Isa::kAvx512Vnni : backends::cpu_blas::Isa::kAvx512;
  }
  // Whether BackendReadsPanels says this file's type.
  bool Reads(const model::PanelTypes& t) const {
    return bf16() ? t.bf16 : GetParam().dtype == DType::kQ4_0 ? t.q4_0 : t.q8_0;
  }

  std::unique_ptr<model::Model> Load(bool panels, bool huge_pages = true) {
    absl::StatusOr<std::unique_ptr<model::Model>> m =
        model::Model::Load(path_, "",
                           model::LoadOptions{.huge_pages = huge_pages,
                                              .panels = panels ? Types() : model::PanelTypes{}});
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  std::string path_;
};

// Element (r, c) of a packed view, by the formula in model/panels.h.
uint16_t PackedAt(const TensorView& v, int64_t r, int64_t c) {
  const auto* p = static_cast<const uint16_t*>(v.data);
  return p[(r / 16) * 16 * v.cols + (c / 2) * 32 + (r % 16) * 2 + c % 2];
}

// Byte i of row r's block b (18 or 34 bytes) of a packed q4_0 or q8_0 view, by
// model/panels.h.
uint8_t QuantPackedByte(const TensorView& v, int64_t r, int64_t b, int i) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  const int64_t block_bytes =
      v.type == DType::kQ4_0 ? model::kQ4_0PanelBlockBytes : model::kQ8_0PanelBlockBytes;
  const uint8_t* block = p + ((r / 16) * (v.cols / 32) + b) * block_bytes;
  if (i < 2) return block[2 * (r % 16) + i];
  const int k = i - 2;
  return block[32 + 64 * (k / 4) + 4 * (r % 16) + k % 4];
}

void ExpectSameMatrix(const TensorView& packed, const TensorView& rows) {
  ASSERT_EQ(rows.layout, Layout::kRows);
  ASSERT_EQ(packed.rows, rows.rows);
  ASSERT_EQ(packed.cols, rows.cols);
  if (rows.type == DType::kQ4_0 || rows.type == DType::kQ8_0) {
    const bool q4 = rows.type == DType::kQ4_0;
    ASSERT_EQ(packed.layout, q4 ? Layout::kQ4_0Panels : Layout::kQ8_0Panels);
    const int64_t blocks = rows.cols / 32;
    const int bytes = q4 ? 18 : 34;
    for (int64_t i = 0; i < rows.rows; ++i) {
      for (int64_t b = 0; b < blocks; ++b) {
        for (int k = 0; k < bytes; ++k) {
          ASSERT_EQ(QuantPackedByte(packed, i, b, k), rows.row(i)[b * bytes + k])
              << "r=" << i << " b=" << b << " byte " << k;
        }
      }
    }
    return;
  }
  ASSERT_EQ(packed.layout, Layout::kBf16Panels);
  const auto* r = static_cast<const uint16_t*>(rows.data);
  for (int64_t i = 0; i < rows.rows; ++i) {
    for (int64_t c = 0; c < rows.cols; ++c) {
      ASSERT_EQ(PackedAt(packed, i, c), r[i * rows.cols + c]) << "r=" << i << " c=" << c;
    }
  }
}

TEST_P(PanelsLoadTest, SameFingerprintAndElementsAsARowMajorLoad) {
  for (bool huge_pages : {true, false}) {
    SCOPED_TRACE(huge_pages ? "huge pages" : "mapped");
    std::unique_ptr<model::Model> rows = Load(false, huge_pages);
    std::unique_ptr<model::Model> panels = Load(true, huge_pages);
    ASSERT_TRUE(rows && panels);
    EXPECT_EQ(panels->fingerprint(), rows->fingerprint());
    EXPECT_FALSE(model::HasPanels(rows->weights()));
    const model::ModelWeights& p = panels->weights();
    const model::ModelWeights& r = rows->weights();
    for (size_t l = 0; l < r.layers.size(); ++l) {
      SCOPED_TRACE(::testing::Message() << "layer " << l);
      ExpectSameMatrix(p.layers[l].wq, r.layers[l].wq);
      ExpectSameMatrix(p.layers[l].wk, r.layers[l].wk);
      ExpectSameMatrix(p.layers[l].wv, r.layers[l].wv);
      ExpectSameMatrix(p.layers[l].wo, r.layers[l].wo);
      ExpectSameMatrix(p.layers[l].w_gate, r.layers[l].w_gate);
      ExpectSameMatrix(p.layers[l].w_up, r.layers[l].w_up);
      ExpectSameMatrix(p.layers[l].w_down, r.layers[l].w_down);
    }
    // The embedding is read by row; a tied output with it (the backend packs a copy).
    EXPECT_EQ(p.token_embedding.layout, Layout::kRows);
    if (GetParam().tied) {
      EXPECT_EQ(p.output.data, p.token_embedding.data);
    } else {
      ExpectSameMatrix(p.output, r.output);
    }
  }
}

// Greedy-free: the logits of a prompt and two decode steps, on one backend.
std::vector<float> Logits(const model::Model& m, backends::Backend& backend) {
  const model::KvLayout& layout = backend.kv_layout();
  backends::KvArena arena(layout);
  const std::span<uint8_t* const> blocks = arena.Allocate(64);
  std::vector<float> all;
  std::vector<float> logits(m.config().vocab_size);
  std::vector<int32_t> next = {1, 17, 42, 99, 300, 7};
  int32_t cached = 0;
  for (int step = 0; step < 3; ++step) {
    backends::Batch batch;
    batch.sequences.push_back({next, cached, blocks, true});
    const absl::Status s = backend.Forward(batch, logits);
    EXPECT_TRUE(s.ok()) << s;
    cached += static_cast<int32_t>(next.size());
    all.insert(all.end(), logits.begin(), logits.end());
    next = {static_cast<int32_t>(step * 31 + 5)};
  }
  return all;
}

TEST_P(PanelsLoadTest, CpuBlasReadsThePanelsOthersRefuseThem) {
  std::unique_ptr<model::Model> rows = Load(false);
  std::unique_ptr<model::Model> panels = Load(true);
  ASSERT_TRUE(rows && panels);
  const model::KvLayout layout = model::KvLayout::ForModel(rows->config(), 16, model::DType::kF32);

  absl::StatusOr<std::unique_ptr<backends::Backend>> reference =
      backends::CreateBackend("reference", *panels, layout, {});
  EXPECT_EQ(reference.status().code(), absl::StatusCode::kFailedPrecondition) << reference.status();

  if (!backends::cpu_blas::IsaSupported(Level())) {
    // No CPU support: the default backend does not read panels, so it refuses them too.
    EXPECT_FALSE(Reads(backends::BackendReadsPanels("cpu_blas", {})));
    absl::StatusOr<std::unique_ptr<backends::Backend>> cpu =
        backends::CreateBackend("cpu_blas", *panels, layout, {.threads = 2});
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kFailedPrecondition) << cpu.status();
    GTEST_SKIP() << "this CPU has no " << backends::cpu_blas::IsaName(Level())
                 << ": the panel kernels are not run";
  }
  EXPECT_TRUE(Reads(backends::BackendReadsPanels("cpu_blas", {})));
  // A lower kernel level (or, for bf16, bf16_dot off) cannot read the panels.
  backends::CpuBlasOptions lower;
  lower.isa = Lower();
  EXPECT_EQ(backends::CpuBlasBackend::Create(*panels, layout, lower).status().code(),
            absl::StatusCode::kFailedPrecondition);
  if (bf16()) {
    backends::CpuBlasOptions no_dot;
    no_dot.gemm.bf16_dot = false;
    EXPECT_EQ(backends::CpuBlasBackend::Create(*panels, layout, no_dot).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }

  backends::CpuBlasOptions options;
  options.threads = 2;
  auto on_panels = backends::CpuBlasBackend::Create(*panels, layout, options);
  auto on_copies = backends::CpuBlasBackend::Create(*rows, layout, options);
  auto oracle = backends::CreateBackend("reference", *rows, layout, {});
  ASSERT_TRUE(on_panels.ok()) << on_panels.status();
  ASSERT_TRUE(on_copies.ok()) << on_copies.status();
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  const std::vector<float> a = Logits(*panels, **on_panels);
  const std::vector<float> b = Logits(*rows, **on_copies);
  const std::vector<float> want = Logits(*rows, **oracle);
  ASSERT_EQ(a.size(), want.size());
  // The same kernel on the same packed bytes: the same bits.
  EXPECT_EQ(a, b);
  // Near the reference (activations rounded to bf16 or quantized to 8 bits, as
  // cpu_blas_backend_test allows).
  float max_abs = 0.0f;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], want[i], 0.02f * (1.0f + max_abs)) << "logit " << i;
  }
}

TEST_P(PanelsLoadTest, LoadModelPacksExactlyWhenTheBackendReadsPanels) {
  for (const std::string& backend : {std::string("cpu_blas"), std::string("reference")}) {
    for (bool allowed : {true, false}) {
      SCOPED_TRACE(backend + (allowed ? " panels allowed" : " panels off"));
      engine::ModelOptions options;
      options.model_path = path_;
      options.backend = backend;
      options.threads = 1;
      options.bf16_panels = allowed || !bf16();  // only this file's type's switch matters
      options.quant_panels = allowed || bf16();
      absl::StatusOr<engine::LoadedModel> loaded = engine::LoadModel(options);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(model::HasPanels(loaded->model->weights()),
                allowed && Reads(backends::BackendReadsPanels(backend, {.threads = 1})));
      EXPECT_FALSE(Reads(backends::BackendReadsPanels(
          backend, {.threads = 1, .bf16_panels = !bf16(), .quant_panels = bf16()})));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypeAndOutput, PanelsLoadTest,
                         ::testing::Values(Param{DType::kBF16, false}, Param{DType::kBF16, true},
                                           Param{DType::kQ4_0, false}, Param{DType::kQ4_0, true},
                                           Param{DType::kQ8_0, false}, Param{DType::kQ8_0, true}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(model::DTypeName(info.param.dtype)) +
                                  (info.param.tied ? "_tied" : "_untied");
                         });

}  // namespace
}  // namespace kvserve
