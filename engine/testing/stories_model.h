// The real stories260K model (with its tokenizer) for tests: the file that
// models/fetch.sh provides, found through $KVSERVE_MODELS_DIR (set by CTest).
#ifndef KVSERVE_ENGINE_TESTING_STORIES_MODEL_H_
#define KVSERVE_ENGINE_TESTING_STORIES_MODEL_H_

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine::testing {

struct StoriesModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

// FAILED_PRECONDITION when KVSERVE_MODELS_DIR is unset; the loader's errors otherwise.
inline absl::StatusOr<StoriesModel> LoadStories260K() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  if (dir == nullptr) {
    return absl::FailedPreconditionError("KVSERVE_MODELS_DIR is unset (run the test with ctest)");
  }
  StoriesModel out;
  absl::StatusOr<std::unique_ptr<model::Model>> model =
      model::Model::Load(std::string(dir) + "/stories260K.gguf");
  if (!model.ok()) return model.status();
  out.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tok =
      model::Tokenizer::Create(out.model->vocab());
  if (!tok.ok()) return tok.status();
  out.tokenizer = *std::move(tok);
  return out;
}

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_STORIES_MODEL_H_
