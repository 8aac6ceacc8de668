// Loads a model and starts an engine over it: the one place a binary (kvserve, the
// benchmarks) or a test turns a model file, a backend name and Engine::Options into a
// running engine. Knows nothing of gRPC.
#ifndef KVSERVE_ENGINE_MODEL_LOADING_H_
#define KVSERVE_ENGINE_MODEL_LOADING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/draft_model.h"
#include "engine/draft_source.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "model/model.h"

namespace kvserve::engine {

struct ModelOptions {
  // GGUF file, or llama2.c checkpoint (then set tokenizer_path). Required by LoadModel.
  std::string model_path;
  // llama2.c tokenizer.bin; empty for GGUF (the tokenizer is inside). Default "".
  std::string tokenizer_path;
  // How the weights file is held in memory (model::LoadOptions). Default: huge pages.
  model::LoadOptions load;
  // Compute backend: "cpu_blas" or "reference". Default "cpu_blas".
  std::string backend = "cpu_blas";
  // Backend worker threads; 0 = all cores. Default 0.
  int threads = 0;
  // f32, bf16 and quantized (q4_0, q8_0, q4_K, q6_K) projections in 16-row panels where
  // the backend reads them (backends::BackendOptions::f32_panels, bf16_panels,
  // quant_panels); LoadModel then loads the model with model::LoadOptions::panels, so the
  // weights are resident once. false: row-major weights and kernels for that type.
  // Default true.
  bool f32_panels = true;
  bool bf16_panels = true;
  bool quant_panels = true;
  // backends::BackendOptions::quant_unpack. Default true.
  bool quant_unpack = true;
  // backends::BackendOptions::bf16_panel_kernel: "auto", "dpbf16" or "fma". Default "auto".
  std::string bf16_panel_kernel = "auto";
  // backends::BackendOptions::batch_invariant: output independent of batch, chunking and
  // cache state. Default true.
  bool batch_invariant = true;
  // Speculative decoding's draft model, with engine.speculative.source "draft_model"
  // (then required; with another source it must be empty): a GGUF file with the
  // target's vocabulary (DraftModelSource checks it), loaded with the same options and
  // run by the same backend and K/V element type as the target with draft_threads
  // threads (0: threads), its K/V in a pool of its own (draft). Defaults "", 0 and
  // DraftModelOptions's.
  std::string draft_model_path;
  int draft_threads = 0;
  DraftModelOptions draft;
  // Engine limits (KV budget, batching, queue, sessions).
  Engine::Options engine;
};

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Engine> engine;  // must be destroyed before `model`; owns a draft model
  std::string backend;
};

// Checks the options before anything is loaded: model_path set ("model is required"),
// threads >= 0, backend "cpu_blas" or "reference", draft_model_path set exactly when
// the speculative source is draft_model, then ValidateEngineOptions.
// INVALID_ARGUMENT whose message starts with the field's name ("threads must be >= 0 ...";
// the engine's field names for `engine`).
absl::Status ValidateModelOptions(const ModelOptions& options);

// Loads the model (and the draft model, whose errors start with "draft model: "),
// creates the backend with the engine's KV layout and starts the engine (StartEngine
// with the draft model as the speculative source). Errors name the step that failed
// (file, "backend: ...", "engine: ..."); INVALID_ARGUMENT for an empty model path or
// threads < 0. (A binary calls ValidateModelOptions first, to fail before it loads
// anything.)
absl::StatusOr<LoadedModel> LoadModel(const ModelOptions& options);

// The second half of LoadModel, for callers that start several engines over one loaded
// `model` (which must outlive the engine): creates options.backend with
// options.threads, options.f32_panels, options.bf16_panels, options.quant_panels,
// options.quant_unpack, options.batch_invariant and
// options.engine.KvLayoutFor(model.config()), then CreateEngine with `draft_source` (a
// LoadDraftModel result for speculative.source "draft_model"; the engine owns it).
// model_path, tokenizer_path and draft_model_path are not used. Same errors as LoadModel.
absl::StatusOr<std::unique_ptr<Engine>> StartEngine(
    const ModelOptions& options, const model::Model& model,
    std::unique_ptr<DraftSource> draft_source = nullptr);

// Loads options.draft_model_path as LoadModel does, as a draft source for `target`
// (for StartEngine; one per engine). Errors start with "draft model: ".
absl::StatusOr<std::unique_ptr<DraftSource>> LoadDraftModel(const ModelOptions& options,
                                                            const model::Model& target);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_MODEL_LOADING_H_
