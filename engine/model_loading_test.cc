#include "engine/model_loading.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine_testing.h"
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

TEST(LoadModelTest, LoadsTheModelAndStartsAWorkingEngine) {
  ModelOptions options;
  options.model_path = Stories260K();
  options.backend = "reference";
  options.threads = 1;
  absl::StatusOr<LoadedModel> loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->backend, "reference");
  ASSERT_NE(loaded->model, nullptr);
  ASSERT_NE(loaded->engine, nullptr);
  Request request;
  request.prompt_tokens = {1, 400, 401};
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 3;
  request.sampling.ignore_eos = true;
  const testing::Result result = testing::RunRequest(*loaded->engine, std::move(request));
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.tokens.size(), 3u);
  loaded->engine->Shutdown(absl::InfiniteFuture());
}

TEST(LoadModelTest, ErrorsNameTheStepThatFailed) {
  ModelOptions options;
  EXPECT_EQ(LoadModel(options).status().code(), absl::StatusCode::kInvalidArgument);

  options.model_path = Stories260K();
  options.threads = -1;
  absl::Status s = LoadModel(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("threads must be >= 0"));

  options.threads = 1;
  options.backend = "no-such-backend";
  s = LoadModel(options).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), StartsWith("backend: "));

  options.backend = "reference";
  options.engine.max_step_tokens = 0;
  s = LoadModel(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("engine: "));

  options.model_path = Stories260K() + ".missing";
  EXPECT_FALSE(LoadModel(options).ok());
}

TEST(StartEngineTest, StartsSeveralEnginesOverOneModel) {
  ModelOptions options;
  options.model_path = Stories260K();
  options.backend = "reference";
  options.threads = 1;
  absl::StatusOr<LoadedModel> loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::unique_ptr<Engine>> second = StartEngine(options, *loaded->model);
  ASSERT_TRUE(second.ok()) << second.status();
  Request request;
  request.prompt_tokens = {1, 400};
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 2;
  request.sampling.ignore_eos = true;
  const testing::Result a = testing::RunRequest(*loaded->engine, request);
  const testing::Result b = testing::RunRequest(**second, request);
  EXPECT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.tokens, b.tokens);
  (*second)->Shutdown(absl::InfiniteFuture());
  loaded->engine->Shutdown(absl::InfiniteFuture());
}

}  // namespace
}  // namespace kvserve::engine
