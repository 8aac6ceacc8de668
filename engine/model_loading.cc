#include "engine/model_loading.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"

namespace kvserve::engine {
namespace {

absl::Status CheckThreads(const ModelOptions& options) {
  if (options.threads >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("threads must be >= 0 (0 = all cores), got ", options.threads));
}

backends::BackendOptions BackendOptionsFrom(const ModelOptions& options) {
  backends::BackendOptions backend_options;
  backend_options.threads = options.threads;
  backend_options.f32_panels = options.f32_panels;
  backend_options.bf16_panels = options.bf16_panels;
  backend_options.quant_panels = options.quant_panels;
  backend_options.batch_invariant = options.batch_invariant;
  return backend_options;
}

}  // namespace

absl::Status ValidateModelOptions(const ModelOptions& options) {
  if (options.model_path.empty()) return absl::InvalidArgumentError("model is required");
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  if (options.backend != "cpu_blas" && options.backend != "reference") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be cpu_blas or reference, got \"", options.backend, "\""));
  }
  return ValidateEngineOptions(options.engine);
}

absl::StatusOr<std::unique_ptr<Engine>> StartEngine(const ModelOptions& options,
                                                    const model::Model& model) {
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  const backends::BackendOptions backend_options = BackendOptionsFrom(options);
  absl::StatusOr<std::unique_ptr<backends::Backend>> backend = backends::CreateBackend(
      options.backend, model, options.engine.KvLayoutFor(model.config()), backend_options);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("backend: ", std::string(backend.status().message())));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      CreateEngine(options.engine, model, *std::move(backend));
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("engine: ", std::string(engine.status().message())));
  }
  return engine;
}

absl::StatusOr<LoadedModel> LoadModel(const ModelOptions& options) {
  if (options.model_path.empty()) return absl::InvalidArgumentError("model is required");
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  LoadedModel loaded;
  model::LoadOptions load = options.load;
  // The model serves this backend alone: where it reads panels, pack them at load
  // so the weights are resident once (not row-major in the Model plus the backend's
  // packed copies).
  const backends::BackendOptions backend_options = BackendOptionsFrom(options);
  const model::PanelTypes reads = backends::BackendReadsPanels(options.backend, backend_options);
  load.panels.f32 |= reads.f32;
  load.panels.bf16 |= reads.bf16;
  load.panels.q4_0 |= reads.q4_0;
  load.panels.q8_0 |= reads.q8_0;
  load.panels.q4_k |= reads.q4_k;
  load.panels.q6_k |= reads.q6_k;
  load.pack_threads = options.threads;  // as many as the backend will run (0: all cores)
  absl::StatusOr<std::unique_ptr<model::Model>> model =
      model::Model::Load(options.model_path, options.tokenizer_path, load);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<Engine>> engine = StartEngine(options, *loaded.model);
  if (!engine.ok()) return engine.status();
  loaded.engine = *std::move(engine);
  loaded.backend = options.backend;
  return loaded;
}

}  // namespace kvserve::engine
