// An f32, bf16, q4_0, q8_0 or Q4_K_M (q4_K with q6_K) GGUF file loaded with
// model::LoadOptions::panels (as engine::LoadModel does for the cpu_blas backend on CPUs with
// AVX2): the same
// fingerprint and the same elements as a row-major load, the cpu_blas backend's logits bit for bit
// those it computes on its own packed copies of a row-major load (and near the reference's), the
// backends that cannot read panels refuse the model, and LoadModel packs exactly when the backend
// reads panels.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu_blas/cpu_blas_backend.h"
#include "backends/cpu_blas/gemm.h"
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
  DType dtype;  // kF32, kBF16, kQ4_0, kQ8_0, or kQ4_K: llama.cpp's Q4_K_M mix (q4_K and q6_K)
  bool tied;    // tied embeddings
};

class PanelsLoadTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    absl::StatusOr<model::ModelConfig> config = bench::PresetConfig("tiny");
    ASSERT_TRUE(config.ok()) << config.status();
    config->tied_embeddings = GetParam().tied;
    bench::SyntheticModelOptions options;
    if (k_quants()) {
      // Rows of whole 256-element blocks.
      config->dim = 256;
      config->head_dim = config->rope_dim = 64;
      config->ffn_dim = 512;
      options.mix = bench::QuantMix::kQ4_K_M;
    }
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

  bool f32() const { return GetParam().dtype == DType::kF32; }
  bool bf16() const { return GetParam().dtype == DType::kBF16; }
  bool k_quants() const { return GetParam().dtype == DType::kQ4_K; }
  // The panel types this file is loaded with (and that BackendReadsPanels says by
  // default): its projections' types (the Q4_K_M file: q4_K and q6_K).
  model::PanelTypes Types() const {
    model::PanelTypes types;
    types.set(GetParam().dtype, true);
    types.q6_k = k_quants();
    return types;
  }
  // The kernel level that reads this file's panels (every type's), and one below it.
  static constexpr backends::cpu_blas::Isa kLevel = backends::cpu_blas::Isa::kAvx2;
  static constexpr backends::cpu_blas::Isa kLower = backends::cpu_blas::Isa::kScalar;
  // Sets the panel switches of `options` (engine::ModelOptions, backends::BackendOptions):
  // this file's type's to `allowed`, the others on (only this file's type's matters).
  template <typename Options>
  void AllowPanels(Options& options, bool allowed) const {
    options.f32_panels = allowed || !f32();
    options.bf16_panels = allowed || !bf16();
    options.quant_panels = allowed || f32() || bf16();
  }
  // Whether BackendReadsPanels says this file's type.
  bool Reads(const model::PanelTypes& t) const { return t.has(GetParam().dtype); }

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

// `packed` is `rows` in its type's panel layout (model::PackMatrixPanels, whose layouts
// model/panels_test checks byte by byte) when `types` has its type, else `rows` itself.
void ExpectSameMatrix(const TensorView& packed, const TensorView& rows,
                      const model::PanelTypes& types) {
  ASSERT_EQ(rows.layout, Layout::kRows);
  ASSERT_EQ(packed.type, rows.type);
  ASSERT_EQ(packed.rows, rows.rows);
  ASSERT_EQ(packed.cols, rows.cols);
  const size_t bytes = static_cast<size_t>(rows.rows) * rows.row_bytes();
  if (!types.has(rows.type)) {
    EXPECT_EQ(packed.layout, Layout::kRows);
    EXPECT_EQ(std::memcmp(packed.data, rows.data, bytes), 0);
    return;
  }
  std::vector<uint8_t> want(bytes);
  ASSERT_EQ(packed.layout, model::PackMatrixPanels(rows, want.data()));
  EXPECT_EQ(std::memcmp(packed.data, want.data(), bytes), 0);
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
      ExpectSameMatrix(p.layers[l].wq, r.layers[l].wq, Types());
      ExpectSameMatrix(p.layers[l].wk, r.layers[l].wk, Types());
      ExpectSameMatrix(p.layers[l].wv, r.layers[l].wv, Types());
      ExpectSameMatrix(p.layers[l].wo, r.layers[l].wo, Types());
      ExpectSameMatrix(p.layers[l].w_gate, r.layers[l].w_gate, Types());
      ExpectSameMatrix(p.layers[l].w_up, r.layers[l].w_up, Types());
      ExpectSameMatrix(p.layers[l].w_down, r.layers[l].w_down, Types());
    }
    // The embedding is read by row; a tied output with it (the backend packs a copy).
    EXPECT_EQ(p.token_embedding.layout, Layout::kRows);
    if (GetParam().tied) {
      EXPECT_EQ(p.output.data, p.token_embedding.data);
    } else {
      ExpectSameMatrix(p.output, r.output, Types());
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

  if (!backends::cpu_blas::IsaSupported(kLevel)) {
    // No CPU support: the default backend does not read panels, so it refuses them too.
    EXPECT_FALSE(Reads(backends::BackendReadsPanels("cpu_blas", {})));
    absl::StatusOr<std::unique_ptr<backends::Backend>> cpu =
        backends::CreateBackend("cpu_blas", *panels, layout, {.threads = 2});
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kFailedPrecondition) << cpu.status();
    GTEST_SKIP() << "this CPU has no " << backends::cpu_blas::IsaName(kLevel)
                 << ": the panel kernels are not run";
  }
  EXPECT_TRUE(Reads(backends::BackendReadsPanels("cpu_blas", {})));
  // A lower kernel level cannot read the panels.
  backends::CpuBlasOptions lower;
  lower.isa = kLower;
  EXPECT_EQ(backends::CpuBlasBackend::Create(*panels, layout, lower).status().code(),
            absl::StatusCode::kFailedPrecondition);

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
  // Near the reference (f32: the same products summed in another order; otherwise the
  // activations rounded to bf16 or quantized to 8 bits, as cpu_blas_backend_test allows).
  // The k-quants' activations go in blocks of 256, coarser: on this file cpu_blas on
  // row-major weights is up to 3.7 % of the logit scale off (the panels within 1.5e-6 of
  // it), so 6 % there.
  const float tolerance = f32() ? 1e-4f : k_quants() ? 0.06f : 0.02f;
  float max_abs = 0.0f;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], want[i], tolerance * (1.0f + max_abs)) << "logit " << i;
  }
  // The lowest levels that read the panels (the 256-bit kernels of avx2, and of avx_vnni
  // where the CPU has it; bf16: the exact products of matmul_bf16_panels_exact) on the same
  // packed bytes, where they are not the level above; and for bf16, the best level with
  // bf16_dot off (the exact products there too, where the CPU has vdpbf16ps).
  struct Variant {
    backends::cpu_blas::Isa level;
    bool bf16_dot;
  };
  std::vector<Variant> variants = {{kLevel, true}, {backends::cpu_blas::Isa::kAvxVnni, true}};
  if (bf16()) variants.push_back({backends::cpu_blas::BestIsa(), false});
  for (const Variant& v : variants) {
    if ((v.level == backends::cpu_blas::BestIsa() && v.bf16_dot) ||
        !backends::cpu_blas::IsaSupported(v.level)) {
      continue;
    }
    SCOPED_TRACE(::testing::Message()
                 << backends::cpu_blas::IsaName(v.level) << (v.bf16_dot ? "" : ", bf16_dot off"));
    backends::CpuBlasOptions at_level = options;
    at_level.isa = v.level;
    at_level.gemm.bf16_dot = v.bf16_dot;
    auto low = backends::CpuBlasBackend::Create(*panels, layout, at_level);
    ASSERT_TRUE(low.ok()) << low.status();
    const std::vector<float> c = Logits(*panels, **low);
    // bf16 without vdpbf16ps: the exact products, as close as f32's.
    const bool exact_bf16 = bf16() && !backends::cpu_blas::UsesBf16Dot(
                                          backends::cpu_blas::KernelsFor(v.level), at_level.gemm);
    const float at_tolerance = exact_bf16 ? 1e-4f : tolerance;
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_NEAR(c[i], want[i], at_tolerance * (1.0f + max_abs)) << "logit " << i;
    }
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
      AllowPanels(options, allowed);
      absl::StatusOr<engine::LoadedModel> loaded = engine::LoadModel(options);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(model::HasPanels(loaded->model->weights()),
                allowed && Reads(backends::BackendReadsPanels(backend, {.threads = 1})));
      backends::BackendOptions off{.threads = 1};
      AllowPanels(off, false);
      EXPECT_FALSE(Reads(backends::BackendReadsPanels(backend, off)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypeAndOutput, PanelsLoadTest,
                         ::testing::Values(Param{DType::kF32, false}, Param{DType::kF32, true},
                                           Param{DType::kBF16, false}, Param{DType::kBF16, true},
                                           Param{DType::kQ4_0, false}, Param{DType::kQ4_0, true},
                                           Param{DType::kQ8_0, false}, Param{DType::kQ8_0, true},
                                           Param{DType::kQ4_K, false}, Param{DType::kQ4_K, true}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return (info.param.dtype == DType::kQ4_K
                                       ? std::string("q4_k_m")
                                       : std::string(model::DTypeName(info.param.dtype))) +
                                  (info.param.tied ? "_tied" : "_untied");
                         });

}  // namespace
}  // namespace kvserve
