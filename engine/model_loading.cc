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
  backend_options.bf16_panel_kernel = options.bf16_panel_kernel;
  backend_options.quant_panels = options.quant_panels;
  backend_options.quant_unpack = options.quant_unpack;
  backend_options.batch_invariant = options.batch_invariant;
  return backend_options;
}

// Loads `path` for options.backend alone: where the backend reads panels, they are
// packed at load so the weights are resident once (not row-major in the Model plus the
// backend's packed copies).
absl::StatusOr<std::unique_ptr<model::Model>> LoadForBackend(const ModelOptions& options,
                                                             const std::string& path,
                                                             const std::string& tokenizer_path) {
  model::LoadOptions load = options.load;
  const model::PanelTypes reads =
      backends::BackendReadsPanels(options.backend, BackendOptionsFrom(options));
  load.panels.f32 |= reads.f32;
  load.panels.bf16 |= reads.bf16;
  load.panels.q4_0 |= reads.q4_0;
  load.panels.q8_0 |= reads.q8_0;
  load.panels.q4_k |= reads.q4_k;
  load.panels.q6_k |= reads.q6_k;
  load.pack_threads = options.threads;  // as many as the backend will run (0: all cores)
  return model::Model::Load(path, tokenizer_path, load);
}

}  // namespace

absl::Status ValidateModelOptions(const ModelOptions& options) {
  if (options.model_path.empty()) return absl::InvalidArgumentError("model is required");
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  if (options.draft_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_threads must be >= 0 (0 = as threads), got ", options.draft_threads));
  }
  if (options.backend != "cpu_blas" && options.backend != "reference") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be cpu_blas or reference, got \"", options.backend, "\""));
  }
  const bool wants_draft_model = options.engine.speculative.source == "draft_model";
  if (wants_draft_model && options.draft_model_path.empty()) {
    return absl::InvalidArgumentError("draft_model is required with speculative draft_model");
  }
  if (!wants_draft_model && !options.draft_model_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_model needs speculative draft_model, got \"",
                     options.engine.speculative.source, "\""));
  }
  return ValidateEngineOptions(options.engine);
}

absl::StatusOr<std::unique_ptr<Engine>> StartEngine(const ModelOptions& options,
                                                    const model::Model& model,
                                                    std::unique_ptr<DraftSource> draft_source) {
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  const backends::BackendOptions backend_options = BackendOptionsFrom(options);
  absl::StatusOr<std::unique_ptr<backends::Backend>> backend = backends::CreateBackend(
      options.backend, model, options.engine.KvLayoutFor(model.config()), backend_options);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("backend: ", std::string(backend.status().message())));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      CreateEngine(options.engine, model, *std::move(backend), std::move(draft_source));
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("engine: ", std::string(engine.status().message())));
  }
  return engine;
}

absl::StatusOr<std::unique_ptr<DraftSource>> LoadDraftModel(const ModelOptions& options,
                                                            const model::Model& target) {
  auto prefixed = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("draft model: ", std::string(s.message())));
  };
  absl::StatusOr<std::unique_ptr<model::Model>> draft =
      LoadForBackend(options, options.draft_model_path, "");
  if (!draft.ok()) return prefixed(draft.status());
  backends::BackendOptions backend_options = BackendOptionsFrom(options);
  if (options.draft_threads > 0) backend_options.threads = options.draft_threads;
  absl::StatusOr<std::unique_ptr<backends::Backend>> backend = backends::CreateBackend(
      options.backend, **draft, options.engine.KvLayoutFor((*draft)->config()), backend_options);
  if (!backend.ok()) return prefixed(backend.status());
  absl::StatusOr<std::unique_ptr<DraftModelSource>> source =
      DraftModelSource::Create(target, *std::move(draft), *std::move(backend), options.draft);
  if (!source.ok()) return prefixed(source.status());
  return std::unique_ptr<DraftSource>(*std::move(source));
}

absl::StatusOr<LoadedModel> LoadModel(const ModelOptions& options) {
  if (options.model_path.empty()) return absl::InvalidArgumentError("model is required");
  if (absl::Status s = CheckThreads(options); !s.ok()) return s;
  LoadedModel loaded;
  absl::StatusOr<std::unique_ptr<model::Model>> model =
      LoadForBackend(options, options.model_path, options.tokenizer_path);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  std::unique_ptr<DraftSource> draft_source;
  if (!options.draft_model_path.empty()) {
    absl::StatusOr<std::unique_ptr<DraftSource>> draft = LoadDraftModel(options, *loaded.model);
    if (!draft.ok()) return draft.status();
    draft_source = *std::move(draft);
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      StartEngine(options, *loaded.model, std::move(draft_source));
  if (!engine.ok()) return engine.status();
  loaded.engine = *std::move(engine);
  loaded.backend = options.backend;
  return loaded;
}

}  // namespace kvserve::engine
