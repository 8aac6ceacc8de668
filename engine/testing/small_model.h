// The small random model and the prompts the engine tests run on it (requests:
// engine_testing.h): one definition, so that tests of different features exercise the
// very same model and prompts.
#ifndef KVSERVE_ENGINE_TESTING_SMALL_MODEL_H_
#define KVSERVE_ENGINE_TESTING_SMALL_MODEL_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backends/testing/random_model.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve::engine::testing {

// A random llama-shaped model: vocabulary 96, context 512, weights from `seed`.
inline std::unique_ptr<model::Model> SmallRandomModel(uint64_t seed = 11) {
  backends::testing::RandomModelOptions o;
  o.config.context_length = 512;
  o.config.vocab_size = 96;
  o.seed = seed;
  auto m = backends::testing::MakeRandomModel(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

// n token ids in [3, 93), a different sequence for each salt.
inline std::vector<int32_t> CyclicPrompt(int n, int32_t salt = 0) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = 3 + (i * 7 + salt * 13) % 90;
  return p;
}

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_SMALL_MODEL_H_
