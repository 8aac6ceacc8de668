// Golden: greedy generation from "Once upon a time" on stories260K prints exactly what
// llama2.c's run prints, from the GGUF file and from the llama2.c files, on every backend
// CreateBackend knows.
//
// testdata/stories260K_once_upon_a_time.golden.txt is the stdout of llama2.c
// (karpathy/llama2.c run.c, gcc -O3 -march=native) for
//   run stories260K.bin -z tok512.bin -t 0 -n 256 -i "Once upon a time"
// Its first line is the text quoted in the design document. run's -n counts positions,
// the prompt's included: BOS + 4 prompt tokens, then 252 sampled tokens (the last one
// printed but never fed back), and a final newline.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/testing/random_model.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/offline_generate.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve {
namespace {

// The first line of llama2.c's output, as quoted in the design document.
constexpr char kDesignQuote[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
constexpr int kLlama2cSampledTokens = 252;  // -n 256 with a 5-token prompt

std::string SourceDir() {
  const char* dir = std::getenv("KVSERVE_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// llama2.c's stdout without its final newline (run prints "\n" after the loop).
std::string Llama2cGolden() {
  std::ifstream in(SourceDir() + "/tests/testdata/stories260K_once_upon_a_time.golden.txt",
                   std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string ModelsDir() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return dir != nullptr ? dir : "models";
}

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

LoadedModel Load(const std::string& path, const std::string& tokenizer_path) {
  LoadedModel loaded;
  absl::StatusOr<std::unique_ptr<model::Model>> model = model::Model::Load(path, tokenizer_path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return loaded;
  loaded.model = std::move(*model);
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create(loaded.model->vocab());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (tokenizer.ok()) loaded.tokenizer = std::move(*tokenizer);
  return loaded;
}

// Every backend must give llama2.c's text.
constexpr const char* kBackends[] = {"reference", "cpu_blas"};

struct Generated {
  std::string text;
  engine::OfflineGenerateResult result;
};

Generated GenerateGreedy(const LoadedModel& loaded, const std::string& backend,
                         model::DType kv_dtype = model::DType::kF32) {
  engine::OfflineGenerateOptions options;
  options.backend = backend;
  options.threads = 1;
  options.kv_dtype = kv_dtype;
  options.sampling.temperature = 0.0f;
  options.sampling.max_tokens = kLlama2cSampledTokens;
  Generated out;
  absl::StatusOr<engine::OfflineGenerateResult> result =
      engine::GenerateOffline(*loaded.model, *loaded.tokenizer, "Once upon a time", options,
                              [&out](std::string_view text) { out.text.append(text); });
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) out.result = *std::move(result);
  return out;
}

void ExpectGolden(const LoadedModel& loaded, model::DType kv_dtype = model::DType::kF32) {
  const std::string golden = Llama2cGolden();
  ASSERT_EQ(golden.substr(0, golden.find('\n')), kDesignQuote);
  for (const std::string backend : kBackends) {
    SCOPED_TRACE("backend " + backend);
    const Generated out = GenerateGreedy(loaded, backend, kv_dtype);
    EXPECT_EQ(out.text, golden);
    EXPECT_EQ(out.result.finish, engine::FinishReason::kLength);
    EXPECT_EQ(out.result.prompt_tokens, (std::vector<int32_t>{1, 403, 407, 261, 378}));
    EXPECT_EQ(out.result.generated_tokens.size(), static_cast<size_t>(kLlama2cSampledTokens));
  }
}

TEST(GoldenTest, Stories260KGguf) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  ExpectGolden(loaded);
}

TEST(GoldenTest, Stories260KLlama2c) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.bin", ModelsDir() + "/tok512.bin");
  ASSERT_NE(loaded.tokenizer, nullptr);
  ExpectGolden(loaded);
}

TEST(GoldenTest, Stories260KGgufWithF16Cache) {
  // Rounding K/V to f16 does not flip any greedy choice on this story (observed, and
  // kept as a regression check: a flip would mean a much larger error than rounding).
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  ExpectGolden(loaded, model::DType::kF16);
}

// The same 252 tokens through the engine (continuous batching, paged KV, the output
// processor), then again from a prompt that extends into the story, so that part of the
// context comes from the prefix cache: the rest of the story must not change.
TEST(GoldenTest, Stories260KThroughTheEngineWithAndWithoutCachedPrefix) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  const std::string golden = Llama2cGolden();
  const std::string prompt = "Once upon a time";
  for (const std::string backend : kBackends) {
    SCOPED_TRACE("backend " + backend);
    auto engine = engine::testing::MakeEngine(*loaded.model, engine::Engine::Options(), backend);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine::Request r;
    r.prompt_tokens = loaded.tokenizer->Encode(prompt, /*add_bos=*/true);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = kLlama2cSampledTokens;
    const engine::testing::Result cold = engine::testing::RunRequest(**engine, r);
    ASSERT_TRUE(cold.status.ok()) << cold.status;
    EXPECT_EQ(cold.reason, engine::FinishReason::kLength);
    ASSERT_EQ(cold.tokens.size(), static_cast<size_t>(kLlama2cSampledTokens));
    EXPECT_EQ(prompt + cold.text, golden);
    EXPECT_EQ(cold.usage.cached_tokens, 0);

    // Prompt + the story's first 40 tokens: 45 tokens, of which 32 (two full blocks of
    // the first request) come from the cache.
    constexpr int kKnown = 40;
    engine::Request warm = r;
    warm.prompt_tokens.insert(warm.prompt_tokens.end(), cold.tokens.begin(),
                              cold.tokens.begin() + kKnown);
    warm.sampling.max_tokens = kLlama2cSampledTokens - kKnown;
    const engine::testing::Result cached = engine::testing::RunRequest(**engine, warm);
    ASSERT_TRUE(cached.status.ok()) << cached.status;
    EXPECT_EQ(cached.usage.cached_tokens, 32);
    EXPECT_EQ(cached.usage.computed_tokens, 45 - 32);
    EXPECT_EQ(cached.tokens, std::vector<int32_t>(cold.tokens.begin() + kKnown, cold.tokens.end()));
  }
}

TEST(GoldenTest, StopStringCutsTheStory) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  engine::OfflineGenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.sampling.stop_strings = {"Lily."};
  std::string text;
  absl::StatusOr<engine::OfflineGenerateResult> result =
      engine::GenerateOffline(*loaded.model, *loaded.tokenizer, "Once upon a time", options,
                              [&text](std::string_view delta) { text.append(delta); });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish, engine::FinishReason::kStopString);
  EXPECT_EQ(text, "Once upon a time, there was a little girl named ");
}

TEST(GoldenTest, StopTokenIdEndsBeforeTheToken) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  engine::OfflineGenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.sampling.max_tokens = 12;
  options.echo_prompt = false;
  absl::StatusOr<engine::OfflineGenerateResult> free_run = engine::GenerateOffline(
      *loaded.model, *loaded.tokenizer, "Once upon a time", options, [](std::string_view) {});
  ASSERT_TRUE(free_run.ok()) << free_run.status();
  ASSERT_EQ(free_run->generated_tokens.size(), 12u);
  // Stop at the 6th token's id: generation ends at its first occurrence, without its text.
  const int32_t stop = free_run->generated_tokens[5];
  const size_t first = static_cast<size_t>(
      std::find(free_run->generated_tokens.begin(), free_run->generated_tokens.end(), stop) -
      free_run->generated_tokens.begin());
  options.sampling.stop_token_ids = {stop};
  std::string text;
  absl::StatusOr<engine::OfflineGenerateResult> result =
      engine::GenerateOffline(*loaded.model, *loaded.tokenizer, "Once upon a time", options,
                              [&text](std::string_view delta) { text.append(delta); });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish, engine::FinishReason::kStop);
  ASSERT_EQ(result->generated_tokens.size(), first + 1);
  const std::vector<int32_t> before(free_run->generated_tokens.begin(),
                                    free_run->generated_tokens.begin() + first);
  EXPECT_EQ(text, loaded.tokenizer->Decode(before));
}

TEST(GoldenTest, MaxTokens) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  engine::OfflineGenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.sampling.max_tokens = 5;
  options.echo_prompt = false;
  std::string text;
  absl::StatusOr<engine::OfflineGenerateResult> result =
      engine::GenerateOffline(*loaded.model, *loaded.tokenizer, "Once upon a time", options,
                              [&text](std::string_view delta) { text.append(delta); });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish, engine::FinishReason::kLength);
  EXPECT_EQ(result->generated_tokens.size(), 5u);
  EXPECT_EQ(text, std::string(kDesignQuote).substr(16, text.size()));  // continuation only
  EXPECT_FALSE(text.empty());
}

TEST(GoldenTest, ContextCapsTheLength) {
  // This tests the loop, not the math: a random model with a 32-position context and a
  // vocabulary that holds every byte token (so the tokenizer accepts it).
  backends::testing::RandomModelOptions random;
  random.config.vocab_size = 300;
  random.config.context_length = 32;
  absl::StatusOr<std::unique_ptr<model::Model>> model = backends::testing::MakeRandomModel(random);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::Create((*model)->vocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  engine::OfflineGenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.sampling.max_tokens = 100000;
  options.sampling.ignore_eos = true;

  // A long prompt leaves little room: generation stops when the context is full.
  const std::string prompt = "abcdefghijklmnopqrst";
  const size_t prompt_tokens = (*tokenizer)->Encode(prompt, /*add_bos=*/true).size();
  ASSERT_LT(prompt_tokens, 32u);
  absl::StatusOr<engine::OfflineGenerateResult> result =
      engine::GenerateOffline(**model, **tokenizer, prompt, options, [](std::string_view) {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish, engine::FinishReason::kLength);
  EXPECT_EQ(result->prompt_tokens.size(), prompt_tokens);
  EXPECT_EQ(result->prompt_tokens.size() + result->generated_tokens.size(), 32u);

  // A prompt that fills the context leaves no room at all.
  const std::string too_long(40, 'x');
  ASSERT_GE((*tokenizer)->Encode(too_long, /*add_bos=*/true).size(), 32u);
  result =
      engine::GenerateOffline(**model, **tokenizer, too_long, options, [](std::string_view) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GoldenTest, BadParametersAreRejected) {
  const LoadedModel loaded = Load(ModelsDir() + "/stories260K.gguf", "");
  ASSERT_NE(loaded.tokenizer, nullptr);
  engine::OfflineGenerateOptions options;
  options.sampling.top_p = 0.0f;
  absl::StatusOr<engine::OfflineGenerateResult> result = engine::GenerateOffline(
      *loaded.model, *loaded.tokenizer, "x", options, [](std::string_view) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  options = engine::OfflineGenerateOptions{};
  options.backend = "no-such-backend";
  result = engine::GenerateOffline(*loaded.model, *loaded.tokenizer, "x", options,
                                   [](std::string_view) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve
