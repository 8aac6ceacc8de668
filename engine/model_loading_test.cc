#include "engine/model_loading.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/testing/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Stories260K() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return std::string(dir != nullptr ? dir : "models") + "/stories260K.gguf";
}

// stories260K on the reference backend, one thread.
ModelOptions ReferenceOptions() {
  ModelOptions options;
  options.model_path = Stories260K();
  options.backend = "reference";
  options.threads = 1;
  return options;
}

Request Greedy(std::vector<int32_t> prompt, int max_tokens) {
  Request request;
  request.prompt_tokens = std::move(prompt);
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  return request;
}

TEST(LoadModelTest, LoadsTheModelAndStartsAWorkingEngine) {
  const ModelOptions options = ReferenceOptions();
  absl::StatusOr<LoadedModel> loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->backend, "reference");
  ASSERT_NE(loaded->model, nullptr);
  ASSERT_NE(loaded->engine, nullptr);
  const testing::Result result = testing::RunRequest(*loaded->engine, Greedy({1, 400, 401}, 3));
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.tokens.size(), 3u);
  loaded->engine->Shutdown(absl::InfiniteFuture());
}

TEST(LoadModelTest, ErrorsNameTheStepThatFailed) {
  ModelOptions options;
  EXPECT_EQ(LoadModel(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = ReferenceOptions();
  options.threads = -1;
  absl::Status s = LoadModel(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("threads must be >= 0"));

  options = ReferenceOptions();
  options.backend = "no-such-backend";
  s = LoadModel(options).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), StartsWith("backend: "));

  options = ReferenceOptions();
  options.engine.max_step_tokens = 0;
  s = LoadModel(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("engine: "));

  options = ReferenceOptions();
  options.model_path += ".missing";
  EXPECT_EQ(LoadModel(options).status().code(), absl::StatusCode::kNotFound);
}

TEST(StartEngineTest, StartsSeveralEnginesOverOneModel) {
  const ModelOptions options = ReferenceOptions();
  absl::StatusOr<LoadedModel> loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::unique_ptr<Engine>> second = StartEngine(options, *loaded->model);
  ASSERT_TRUE(second.ok()) << second.status();
  const testing::Result a = testing::RunRequest(*loaded->engine, Greedy({1, 400}, 2));
  const testing::Result b = testing::RunRequest(**second, Greedy({1, 400}, 2));
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.tokens, b.tokens);
  (*second)->Shutdown(absl::InfiniteFuture());
  loaded->engine->Shutdown(absl::InfiniteFuture());
}

}  // namespace
}  // namespace kvserve::engine
