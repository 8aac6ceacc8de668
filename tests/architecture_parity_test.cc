// Each architecture on a synthetic GGUF file (bench::WriteSyntheticModel, what
// `kvserve-bench mkmodel` writes): kvserve's greedy tokens equal llama.cpp's for 64 steps on
// several prompts (llama, Llama 3.x RoPE settings with biases, qwen2, qwen3, qwen3moe,
// deepseek2 with latent attention, dense and with experts (DeepSeek-V2's routing and
// DeepSeek-V3's: sigmoid gating, selection bias, expert groups), tied and untied, YaRN RoPE
// scaling), and equal the textbook
// double-precision forward pass (backends/testing/textbook_forward.h). The reference and
// cpu_blas backends both run every case.
//
// llama.cpp is a peer built outside the tree (../shared/PEERS.md); the test looks in the
// directory named by the environment variable KVSERVE_LLAMA_CPP_BIN and skips those cases
// with a message when it is unset or holds neither program below. Two generations of
// llama.cpp are read; in both, llama.cpp's prompt ids are fed to kvserve, so the
// comparison is of the forward pass, not the tokenizer:
// - a current one (2026, has llama-completion): its verbose log lists the prompt ids
//   ("tokens: [ 'piece':id, ... ]") and its standard output is the text of the prompt and
//   of each generated token, which is compared, token by token, with the pieces of
//   kvserve's tokens (FirstDifferingPiece); flash attention is off (see RunLlamaCompletion);
// - the February 2025 snapshot c392e50 (llama-cli only, which predates qwen3): its verbose
//   log's "eval: [ 'piece':id, ... ]" batches are the prompt, then each generated id.
//
// "Not near-ties": the weights are drawn with weight_std 0.1 (mkmodel --weight_std), and
// the test asserts that at every greedy step the reference's best logit leads the second
// by more than kMinMargin, far above the float summation differences between programs
// (about 1e-5 here), so equal tokens are a real agreement, not luck. On a mismatch the
// test names the first differing step and kvserve's top-2 gap there.
//
// Files at the presets' full shapes are too large for a test to write: written by hand,
// they are named by KVSERVE_PARITY_FILES (ArchitectureParityFiles; skipped when unset).
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

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "backends/backend.h"
#include "backends/kernels/ops.h"
#include "backends/kv_arena.h"
#include "backends/testing/textbook_forward.h"
#include "bench/synthetic_model.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer.h"

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
  bool needs_current_llama_cpp = false;  // not in c392e50
  // Changes the config after ApplyArchitecture (nullptr: none).
  void (*adjust)(model::ModelConfig&) = nullptr;
  // YaRN, factor 4, over an original context of 32 (the prompts run to position ~70), so
  // pair 0 keeps its angle, pair 1 mixes, the rest are scaled; deepseek2 with DeepSeek-V2's
  // yarn_log_multiplier (mscale_all_dim 1, as DeepSeek-V3), which moves the magnitude into
  // kq_scale.
  bool yarn = false;
  // The weights' seed (mkmodel --seed): another where seed 3 gives a near-tie.
  uint64_t seed = 3;
};

// deepseek2 with every layer dense (Youtu-LLM's form): the tiny preset's FFN size.
void Deepseek2Dense(model::ModelConfig& c) {
  c.ffn_dim = c.dense_ffn_dim;
  c.n_experts = c.n_experts_used = c.n_dense_layers = c.dense_ffn_dim = c.n_shared_experts = 0;
  c.expert_weights_norm = true;
}

// deepseek2 with DeepSeek-V3's routing: sigmoid gating, the selection bias, 4 groups of 2
// experts of which 2 are kept, normalized weights scaled by 2.5, one shared expert.
void Deepseek3Routing(model::ModelConfig& c) {
  c.expert_gating = model::ExpertGating::kSigmoid;
  c.expert_probs_bias = true;
  c.n_expert_groups = 4;
  c.n_expert_groups_used = 2;
  c.expert_weights_norm = true;
  c.expert_weights_scale = 2.5f;
  c.n_shared_experts = 1;
}

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
  if (c.adjust != nullptr) c.adjust(*config);
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
  if (c.yarn) {
    config->rope_freq_scale = 0.25f;
    config->yarn_ext_factor = 1.0f;
    config->yarn_orig_context_length = 32;
    if (config->mla()) config->yarn_log_multiplier = 1.0f;
  }
  bench::SyntheticModelOptions options;
  options.config = *config;
  options.seed = c.seed;
  options.weight_std = 0.1f;
  const std::string path = TempPath(c.name + ".gguf");
  if (absl::Status s = bench::WriteSyntheticModel(options, path); !s.ok()) return s;
  return path;
}

// Greedy decoding of `prompt` for up to kSteps tokens (stopping before EOS), on one backend.
// margins[i]: the lead of step i's best logit over the second.
// `backend_name` may name a kernel level after a colon ("cpu_blas:avx2").
std::vector<int32_t> Greedy(const model::Model& m, const std::string& backend_name,
                            const std::vector<int32_t>& prompt, std::vector<float>* margins,
                            int threads = 1) {
  const model::KvLayout layout = model::KvLayout::ForModel(m.config(), 16, model::DType::kF32);
  const std::vector<std::string> name_level = absl::StrSplit(backend_name, absl::MaxSplits(':', 1));
  auto backend = backends::CreateBackend(
      name_level[0], m, layout,
      {.threads = threads, .kernel_level = name_level.size() > 1 ? name_level[1] : ""});
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  backends::KvArena arena(layout);
  // The positions this run reaches (a full-shape file declares up to 163,840).
  const std::span<uint8_t* const> blocks = arena.Allocate(std::min<int64_t>(
      m.config().context_length, static_cast<int64_t>(prompt.size()) + kSteps + 1));
  std::vector<float> logits(m.config().vocab_size);
  std::vector<int32_t> out;
  std::vector<int32_t> next = prompt;
  int32_t cached = 0;
  margins->clear();
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
    margins->push_back(logits[best] - second);
    if (best == m.vocab().eos_id) break;
    out.push_back(best);
    next = {best};
  }
  return out;
}

// The ids of every line of `log` that matches `line` (its group 1 holds
// "'piece':id, 'piece':id, ...").
std::vector<std::vector<int32_t>> IdLists(const std::string& log, const std::regex& line) {
  std::vector<std::vector<int32_t>> lists;
  static const std::regex kId(R"(':(\d+)(?=, '|$))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    const std::string body = (*it)[1].str();
    std::vector<int32_t>& ids = lists.emplace_back();
    for (auto id = std::sregex_iterator(body.begin(), body.end(), kId);
         id != std::sregex_iterator(); ++id) {
      ids.push_back(std::stoi((*id)[1].str()));
    }
  }
  return lists;
}

// What one llama.cpp program printed for one prompt.
struct LlamaCppRun {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;  // llama-cli (c392e50) only
  std::string output;  // llama-completion only: its stdout, the prompt's pieces then the tokens'
};

std::string ReadAndRemove(const std::string& path) {
  std::string text;
  if (std::FILE* f = std::fopen(path.c_str(), "rb"); f != nullptr) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  std::filesystem::remove(path);
  return text;
}

// Runs `cmd` with its standard output and error captured into *out and *err.
bool RunCapturing(const std::string& cmd, std::string* out, std::string* err) {
  const std::string out_path = TempPath("llama_cpp.out");
  const std::string err_path = TempPath("llama_cpp.err");
  const std::string full = cmd + " </dev/null >'" + out_path + "' 2>'" + err_path + "'";
  const int rc = std::system(full.c_str());
  *out = ReadAndRemove(out_path);
  *err = ReadAndRemove(err_path);
  EXPECT_EQ(rc, 0) << full << "\n" << err->substr(0, 4000);
  return rc == 0;
}

// The greedy flags both programs take, generating `n` tokens.
std::string GreedyFlags(const std::string& model_path, const std::string& prompt, int n,
                        int threads = 1) {
  return " -m '" + model_path + "' -p '" + prompt + "' -n " + std::to_string(n) +
         " --temp 0 -no-cnv -t " + std::to_string(threads) + " -c 256 -s 1 -ctk f32 -ctv f32 -v";
}

// llama-cli of c392e50: the "eval: [ ... ]" batches are the prompt, then one per token.
// -n kSteps + 1: the last sampled token is never evaluated, so never logged.
bool RunLlamaCli(const std::string& bin, const std::string& model_path, const std::string& prompt,
                 LlamaCppRun* run) {
  static const std::regex kEval(R"(eval: \[ (.*) \]\n)");
  std::string out, err;
  if (!RunCapturing("'" + bin + "/llama-cli'" + GreedyFlags(model_path, prompt, kSteps + 1), &out,
                    &err)) {
    return false;
  }
  const std::vector<std::vector<int32_t>> batches = IdLists(err + out, kEval);
  if (batches.empty()) return false;
  run->prompt_ids = batches[0];
  for (size_t i = 1; i < batches.size(); ++i) {
    run->generated_ids.insert(run->generated_ids.end(), batches[i].begin(), batches[i].end());
  }
  return true;
}

// A current llama-completion: the prompt ids from its log's "tokens: [ ... ]", and its
// standard output (the prompt's pieces, then each generated token's piece, then "\n\n",
// after an EOS " [end of text]\n\n\n"). Its text goes through an asynchronous logger that
// is never joined, so at exit it loses what it has not written yet (llama.cpp issue 22142;
// one run in ten on an idle machine, dozens of tokens on a loaded one). So it is asked for
// kSlack more tokens than are compared (the longer it runs, the more of the start the
// logger writes), and a run whose output lacks the closing "\n\n" is repeated, up to
// kAttempts times, keeping the longest output (each is a prefix of the same text).
bool RunLlamaCompletion(const std::string& bin, const std::string& model_path,
                        const std::string& prompt, LlamaCppRun* run, int threads = 1) {
  static const std::regex kTokens(R"( tokens: \[ (.*) \]\n)");
  constexpr int kAttempts = 5;
  constexpr int kSlack = 150;  // with the prompt, within the 256 positions of -c 256
  // -fa off: llama.cpp's CPU flash attention (on by default since 2025) rounds through
  // f16 and moves logits by up to 1e-3 relative, enough to flip this test's closer steps.
  const std::string cmd = "'" + bin + "/llama-completion'" +
                          GreedyFlags(model_path, prompt, kSteps + kSlack, threads) + " -fa off";
  std::string out, err;
  for (int attempt = 0; attempt < kAttempts && !run->output.ends_with("\n\n"); ++attempt) {
    if (!RunCapturing(cmd, &out, &err)) return false;
    if (out.size() > run->output.size()) run->output = out;
  }
  const std::vector<std::vector<int32_t>> prompts = IdLists(err, kTokens);
  if (prompts.empty()) return false;
  run->prompt_ids = prompts[0];
  return true;
}

// The first of `generated` (kSteps tokens, or fewer before an EOS) whose piece, as
// llama-completion prints it, differs from its `output` after the prompt's pieces;
// generated.size() when kvserve stopped at an EOS and llama.cpp did not; SIZE_MAX when they
// agree. llama.cpp prints a token's bytes (byte tokens as their byte, control tokens as
// nothing, no space dropped after a BOS) with printf's "%s", so a piece ends at its first
// NUL: the byte token <0x00> prints nothing.
size_t FirstDifferingPiece(const model::Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& generated, std::string_view output) {
  // Consumes the piece of `id` from the front of `output`; false when it is not there.
  const auto consume = [&](int32_t id) {
    std::string_view piece = tokenizer.PieceBytes(/*prev_id=*/-1, id);
    piece = piece.substr(0, piece.find('\0'));
    if (!output.starts_with(piece)) return false;
    output.remove_prefix(piece.size());
    return true;
  };
  for (int32_t id : prompt) {
    if (!consume(id)) return 0;
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    if (!consume(generated[i])) return i;
  }
  const bool stopped = static_cast<int>(generated.size()) < kSteps;
  return !stopped || output.starts_with(" [end of text]") ? SIZE_MAX : generated.size();
}

// The first index where `a` and `b` differ (the shorter one's length when one is a prefix
// of the other), or SIZE_MAX when they are equal.
size_t FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a == b) return SIZE_MAX;
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first -
                             a.begin());
}

// For each prompt: llama.cpp's greedy text (with its prompt ids) against each of
// `backends`' greedy tokens for kSteps steps, every step's top-1 lead above kMinMargin.
// `current`: bin holds llama-completion (else the c392e50 llama-cli).
void ExpectGreedyEqualsLlamaCpp(const std::string& bin, bool current, const std::string& path,
                                const std::vector<std::string>& backends, int threads = 1) {
  // Mapped, so kvserve and llama.cpp share the file's pages (two private copies of a 17 GB
  // file do not fit this machine's memory).
  absl::StatusOr<std::unique_ptr<model::Model>> m =
      model::Model::Load(path, "", {.huge_pages = false});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create((*m)->vocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  for (const char* prompt : kPrompts) {
    SCOPED_TRACE(prompt);
    LlamaCppRun run;
    ASSERT_TRUE(current ? RunLlamaCompletion(bin, path, prompt, &run, threads)
                        : RunLlamaCli(bin, path, prompt, &run));
    std::vector<int32_t> first;  // backends[0]'s tokens
    for (const std::string& backend : backends) {
      std::vector<float> margins;
      const std::vector<int32_t> got = Greedy(**m, backend, run.prompt_ids, &margins, threads);
      if (&backend == &backends[0]) {
        first = got;
      } else {
        const size_t apart = FirstDifference(got, first);
        std::printf("[parity] %s | %s | %s: equals %s for %zu tokens\n", path.c_str(), prompt,
                    backend.c_str(), backends[0].c_str(), apart == SIZE_MAX ? got.size() : apart);
      }
      const size_t differs = current
                                 ? FirstDifferingPiece(**tokenizer, run.prompt_ids, got, run.output)
                                 : FirstDifference(got, run.generated_ids);
      EXPECT_EQ(differs, SIZE_MAX)
          << backend << ": first difference at step " << differs
          << ", where kvserve's top-2 gap is "
          << (differs < margins.size() ? margins[differs] : NAN)
          << "\nkvserve:   " << ::testing::PrintToString(got) << "\nllama.cpp: "
          << (current ? ::testing::PrintToString(run.output)
                      : ::testing::PrintToString(run.generated_ids));
      ASSERT_FALSE(margins.empty()) << backend;
      EXPECT_GE(got.size(), 16u) << backend << ": EOS so early makes too short a comparison";
      const float least = *std::min_element(margins.begin(), margins.end());
      EXPECT_GT(least, kMinMargin) << backend << ": a near-tie makes the comparison luck";
      std::printf("[parity] %s | %s | %s: %zu tokens equal, least top-2 gap %.3g\n", path.c_str(),
                  prompt, backend.c_str(), differs == SIZE_MAX ? got.size() : differs, least);
    }
  }
}

// The directory of llama.cpp's programs (KVSERVE_LLAMA_CPP_BIN), or nullptr when it holds
// neither llama-completion nor llama-cli; *current: it holds llama-completion.
const char* LlamaCppBin(bool* current) {
  const char* bin = std::getenv("KVSERVE_LLAMA_CPP_BIN");
  *current = bin != nullptr && std::filesystem::exists(std::string(bin) + "/llama-completion");
  if (!*current && (bin == nullptr || !std::filesystem::exists(std::string(bin) + "/llama-cli"))) {
    return nullptr;
  }
  return bin;
}

constexpr char kNoLlamaCpp[] =
    "llama.cpp not found: set KVSERVE_LLAMA_CPP_BIN to the directory holding "
    "llama-completion or llama-cli (see ../shared/PEERS.md); comparison skipped";

class ArchitectureParityTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchitectureParityTest, GreedyTokensEqualLlamaCpp) {
  const ArchCase& c = GetParam();
  bool current = false;
  const char* bin = LlamaCppBin(&current);
  if (bin == nullptr) GTEST_SKIP() << kNoLlamaCpp;
  if (!current && c.needs_current_llama_cpp) {
    GTEST_SKIP() << c.arch << " is not in a llama.cpp without llama-completion (c392e50)";
  }
  absl::StatusOr<std::string> path = WriteModel(c);
  ASSERT_TRUE(path.ok()) << path.status();
  ExpectGreedyEqualsLlamaCpp(bin, current, *path, {"reference", "cpu_blas"});
  std::filesystem::remove(*path);
}

// Files too large for a test to write (the full preset shapes: `kvserve-bench mkmodel
// --preset youtu2b|deepseek-v2-lite --arch deepseek2 --weight_std 0.1`, and llama-quantize's
// copies of them), named by hand: KVSERVE_PARITY_FILES is a comma-separated list of GGUF
// paths, KVSERVE_PARITY_BACKENDS the backends to run (default "reference,cpu_blas"; a
// kernel level may follow a colon, "cpu_blas:avx2"; the reference is scalar, minutes per
// prompt at billions of parameters; each backend after the first is also compared with the
// first, printed), KVSERVE_PARITY_THREADS
// the threads of both programs (default 1: llama.cpp's OpenMP threads spin at every
// barrier, and on a 2-core machine shared with anything else 2 of them ran 20x slower
// than one). docs/architectures.md records what was run.
TEST(ArchitectureParityFiles, GreedyTokensEqualLlamaCpp) {
  const char* files = std::getenv("KVSERVE_PARITY_FILES");
  if (files == nullptr || *files == '\0') {
    GTEST_SKIP() << "KVSERVE_PARITY_FILES not set: no hand-written files to compare";
  }
  bool current = false;
  const char* bin = LlamaCppBin(&current);
  if (bin == nullptr) GTEST_SKIP() << kNoLlamaCpp;
  const char* names = std::getenv("KVSERVE_PARITY_BACKENDS");
  const std::vector<std::string> backends = absl::StrSplit(
      names != nullptr && *names != '\0' ? names : "reference,cpu_blas", ',', absl::SkipEmpty());
  const char* threads_text = std::getenv("KVSERVE_PARITY_THREADS");
  int threads = 1;
  if (threads_text != nullptr && *threads_text != '\0') {
    ASSERT_TRUE(absl::SimpleAtoi(threads_text, &threads) && threads >= 1 && threads <= 256)
        << "KVSERVE_PARITY_THREADS=" << threads_text << ": want a thread count in [1, 256]";
  }
  for (const std::string& path :
       std::vector<std::string>(absl::StrSplit(files, ',', absl::SkipEmpty()))) {
    SCOPED_TRACE(path);
    ExpectGreedyEqualsLlamaCpp(bin, current, path, backends, threads);
  }
}

// A second oracle for every architecture (and the only one for qwen3 when llama.cpp is
// c392e50): greedy tokens equal the textbook forward pass's, logits within 1e-4 relative.
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
    std::vector<float> margins;
    std::vector<int32_t> got = Greedy(**m, backend, prompt, &margins);
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
                      ArchCase{"qwen3", "qwen3", true, false, /*needs_current_llama_cpp=*/true},
                      ArchCase{"qwen3moe", "qwen3moe", false, false,
                               /*needs_current_llama_cpp=*/true},
                      ArchCase{"deepseek2", "deepseek2", false, false,
                               /*needs_current_llama_cpp=*/true, nullptr, /*yarn=*/false,
                               /*seed=*/4},
                      ArchCase{"deepseek2_dense", "deepseek2", false, false,
                               /*needs_current_llama_cpp=*/true, Deepseek2Dense},
                      ArchCase{"deepseek2_v3_routing", "deepseek2", false, false,
                               /*needs_current_llama_cpp=*/true, Deepseek3Routing},
                      ArchCase{"llama_yarn", "llama", false, false, false, nullptr,
                               /*yarn=*/true},
                      ArchCase{"qwen2_yarn", "qwen2", true, false, false, nullptr, /*yarn=*/true},
                      ArchCase{"deepseek2_yarn", "deepseek2", false, false,
                               /*needs_current_llama_cpp=*/true, nullptr, /*yarn=*/true,
                               /*seed=*/4}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve
