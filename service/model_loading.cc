#include "service/model_loading.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"

namespace kvserve::service {

absl::StatusOr<LoadedModel> LoadModel(const ModelOptions& options) {
  if (options.model_path.empty()) return absl::InvalidArgumentError("model path is required");
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads must be >= 0 (0 = all cores), got ", options.threads));
  }
  LoadedModel loaded;
  absl::StatusOr<std::unique_ptr<model::Model>> model =
      model::Model::Load(options.model_path, options.tokenizer_path);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);

  backends::BackendOptions backend_options;
  backend_options.threads = options.threads;
  absl::StatusOr<std::unique_ptr<backends::Backend>> backend =
      backends::CreateBackend(options.backend, *loaded.model,
                              options.engine.KvLayoutFor(loaded.model->config()), backend_options);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("backend: ", std::string(backend.status().message())));
  }
  absl::StatusOr<std::unique_ptr<engine::Engine>> engine =
      engine::CreateEngine(options.engine, *loaded.model, *std::move(backend));
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("engine: ", std::string(engine.status().message())));
  }
  loaded.engine = *std::move(engine);
  loaded.backend = options.backend;
  return loaded;
}

}  // namespace kvserve::service
