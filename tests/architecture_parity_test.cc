// Each architecture on a synthetic GGUF file (bench::WriteSyntheticModel, what
// `kvserve-bench mkmodel` writes): kvserve's greedy tokens equal llama.cpp's for 64 steps on
// several prompts (llama, Llama 3.x RoPE settings with biases, qwen2, tied and untied),
// and, for qwen3 and qwen3moe (8 experts, 2 per token), which the llama.cpp snapshot
// (c392e50) predates, equal the textbook
// double-precision forward pass (backends/testing/textbook_forward.h). The reference and
// cpu_blas backends both run every case.
//
// llama.cpp is a peer built outside the tree (../shared/PEERS.md); the test looks for
// llama-cli in the directory named by the environment variable KVSERVE_LLAMA_CPP_BIN and
// skips those cases with a message when it is unset or has no llama-cli. It reads the
// token ids from llama-cli's verbose log ("eval: [ 'piece':id, ... ]"): the first batch
// is the prompt as llama.cpp tokenized it (kvserve is fed the same ids, so the comparison
// is of the forward pass, not the tokenizer), each later one a generated token.
//
// "Not near-ties": the weights are drawn with weight_std 0.1 (mkmodel --weight_std), and
// the test asserts that at every greedy step the reference's best logit leads the second
// by more than kMinMargin, far above the float summation differences between programs
// (about 1e-5 here), so equal tokens are a real agreement, not luck.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kernels/ops.h"
#include "backends/kv_arena.h"
#include "backends/testing/textbook_forward.h"
#include "bench/synthetic_model.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve {
namespace {

constexpr int kSteps = 64;
constexpr float kMinMargin = 2e-4f;
const char* const kPrompts[] = {"Once upon a time", "The quick brown fox", "hello, world! 42"};

struct ArchCase {
  std::string name;
  std::string arch;
  bool tied = false;
  bool llama3 = false;  // rope_freq_base 500000, Llama 3.x factors, linear scale, biases
  bool has_llama_cpp_peer = true;
};

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("arch_parity_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

absl::StatusOr<std::string> WriteModel(const ArchCase& c) {
  absl::StatusOr<model::ModelConfig> config = bench::PresetConfig("tiny");
  if (!config.ok()) return config.status();
  if (absl::Status s = bench::ApplyArchitecture(c.arch, *config); !s.ok()) return s;
  config->tied_embeddings = c.tied;
  if (c.llama3) {
    config->rope_base = 500000.0f;
    // A short original context so that the tiny model's 16-dim heads get all three
    // regions of the factor curve (1, interpolated, factor).
    config->rope_freq_factors = bench::Llama3RopeFactors(config->rope_base, config->rope_dim, 8.0f,
                                                         1.0f, 4.0f, /*original=*/64);
    config->rope_freq_scale = 0.5f;
    config->attention_qkv_bias = true;
    config->attention_output_bias = true;
  }
  bench::SyntheticModelOptions options;
  options.config = *config;
  options.seed = 3;
  options.weight_std = 0.1f;
  const std::string path = TempPath(c.name + ".gguf");
  if (absl::Status s = bench::WriteSyntheticModel(options, path); !s.ok()) return s;
  return path;
}

// Greedy decoding of `prompt` for up to kSteps tokens (stopping before EOS), on one backend.
// min_margin: the smallest lead of the best logit over the second over all steps.
std::vector<int32_t> Greedy(const model::Model& m, const std::string& backend_name,
                            const std::vector<int32_t>& prompt, float* min_margin) {
  const model::KvLayout layout = model::KvLayout::ForModel(m.config(), 16, model::DType::kF32);
  auto backend = backends::CreateBackend(backend_name, m, layout, {.threads = 1});
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  backends::KvArena arena(layout);
  const std::span<uint8_t* const> blocks = arena.Allocate(m.config().context_length);
  std::vector<float> logits(m.config().vocab_size);
  std::vector<int32_t> out;
  std::vector<int32_t> next = prompt;
  int32_t cached = 0;
  *min_margin = INFINITY;
  while (static_cast<int>(out.size()) < kSteps) {
    backends::Batch batch;
    batch.sequences.push_back({next, cached, blocks, true});
    const absl::Status s = (*backend)->Forward(batch, logits);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    cached += static_cast<int32_t>(next.size());
    const int32_t best = static_cast<int32_t>(backends::kernels::ArgMax(logits));
    float second = -INFINITY;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (static_cast<int32_t>(i) != best) second = std::max(second, logits[i]);
    }
    *min_margin = std::min(*min_margin, logits[best] - second);
    if (best == m.vocab().eos_id) break;
    out.push_back(best);
    next = {best};
  }
  return out;
}

// The ids of every "eval: [ ... ]" line of llama-cli's verbose log.
std::vector<std::vector<int32_t>> EvalBatches(const std::string& log) {
  std::vector<std::vector<int32_t>> batches;
  static const std::regex kLine(R"(eval: \[ (.*) \]\n)");
  static const std::regex kId(R"(':(\d+)(?=, '|$))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), kLine); it != std::sregex_iterator();
       ++it) {
    const std::string body = (*it)[1].str();
    std::vector<int32_t>& ids = batches.emplace_back();
    for (auto id = std::sregex_iterator(body.begin(), body.end(), kId);
         id != std::sregex_iterator(); ++id) {
      ids.push_back(std::stoi((*id)[1].str()));
    }
  }
  return batches;
}

// Runs llama-cli greedily on `prompt`; returns the prompt ids and the generated ids.
bool RunLlamaCli(const std::string& bin, const std::string& model_path, const std::string& prompt,
                 std::vector<int32_t>* prompt_ids, std::vector<int32_t>* generated) {
  const std::string log_path = TempPath("llama_cli.log");
  // -n kSteps + 1: the last sampled token is never evaluated, so never logged.
  const std::string cmd = "'" + bin + "/llama-cli' -m '" + model_path + "' -p '" + prompt +
                          "' -n " + std::to_string(kSteps + 1) +
                          " --temp 0 -no-cnv -t 1 -c 256 -s 1 -ctk f32 -ctv f32 -v </dev/null >'" +
                          log_path + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::FILE* f = std::fopen(log_path.c_str(), "rb");
  std::string log;
  if (f != nullptr) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) log.append(buf, n);
    std::fclose(f);
  }
  std::filesystem::remove(log_path);
  EXPECT_EQ(rc, 0) << cmd << "\n" << log.substr(0, 4000);
  const std::vector<std::vector<int32_t>> batches = EvalBatches(log);
  if (rc != 0 || batches.empty()) return false;
  *prompt_ids = batches[0];
  generated->clear();
  for (size_t i = 1; i < batches.size(); ++i) {
    generated->insert(generated->end(), batches[i].begin(), batches[i].end());
  }
  return true;
}

class ArchitectureParityTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchitectureParityTest, GreedyTokensEqualLlamaCpp) {
  const ArchCase& c = GetParam();
  if (!c.has_llama_cpp_peer) GTEST_SKIP() << c.arch << " is not in llama.cpp c392e50";
  const char* bin = std::getenv("KVSERVE_LLAMA_CPP_BIN");
  if (bin == nullptr || !std::filesystem::exists(std::string(bin) + "/llama-cli")) {
    GTEST_SKIP() << "llama.cpp not found: set KVSERVE_LLAMA_CPP_BIN to the directory holding "
                    "llama-cli (see ../shared/PEERS.md); comparison skipped";
  }
  absl::StatusOr<std::string> path = WriteModel(c);
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const char* prompt : kPrompts) {
    SCOPED_TRACE(prompt);
    std::vector<int32_t> prompt_ids, want;
    ASSERT_TRUE(RunLlamaCli(bin, *path, prompt, &prompt_ids, &want));
    EXPECT_GE(want.size(), 16u) << "llama.cpp stopped early: too short a comparison";
    for (const char* backend : {"reference", "cpu_blas"}) {
      float margin = 0;
      const std::vector<int32_t> got = Greedy(**m, backend, prompt_ids, &margin);
      EXPECT_EQ(got, want) << backend;
      EXPECT_GT(margin, kMinMargin) << backend << ": a near-tie makes the comparison luck";
    }
  }
  std::filesystem::remove(*path);
}

// For the architectures llama.cpp c392e50 lacks (qwen3), and as a second oracle for the
// others: greedy tokens equal the textbook forward pass's, logits within 1e-4 relative.
TEST_P(ArchitectureParityTest, GreedyTokensEqualTextbookForwardPass) {
  const ArchCase& c = GetParam();
  absl::StatusOr<std::string> path = WriteModel(c);
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int32_t> prompt = {1, 300, 301, 302, 303, 304};
  constexpr int kTextbookSteps = 24;  // O(n^2) per step in double
  absl::StatusOr<std::vector<int32_t>> want =
      backends::testing::TextbookGreedy(**m, prompt, kTextbookSteps, (*m)->vocab().eos_id);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const char* backend : {"reference", "cpu_blas"}) {
    float margin = 0;
    std::vector<int32_t> got = Greedy(**m, backend, prompt, &margin);
    got.resize(std::min(got.size(), want->size()));
    EXPECT_EQ(got, *want) << backend;
  }
  std::filesystem::remove(*path);
}

INSTANTIATE_TEST_SUITE_P(
    Files, ArchitectureParityTest,
    ::testing::Values(ArchCase{"llama", "llama"}, ArchCase{"llama_tied", "llama", true},
                      ArchCase{"llama3", "llama", true, true}, ArchCase{"qwen2", "qwen2"},
                      ArchCase{"qwen2_tied", "qwen2", true},
                      ArchCase{"qwen3", "qwen3", true, false, /*has_llama_cpp_peer=*/false},
                      ArchCase{"qwen3moe", "qwen3moe", false, false, /*has_llama_cpp_peer=*/false}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve
