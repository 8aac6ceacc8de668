// Loads a model and starts an engine over it: what a server needs before Attach().
#ifndef KVSERVE_SERVICE_MODEL_LOADING_H_
#define KVSERVE_SERVICE_MODEL_LOADING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "model/model.h"

namespace kvserve::service {

struct ModelOptions {
  // GGUF file, or llama2.c checkpoint (then set tokenizer_path). Required.
  std::string model_path;
  // llama2.c tokenizer.bin; empty for GGUF (the tokenizer is inside). Default "".
  std::string tokenizer_path;
  // Compute backend: "cpu_blas" or "reference". Default "cpu_blas".
  std::string backend = "cpu_blas";
  // Backend worker threads; 0 = all cores. Default 0.
  int threads = 0;
  // Engine limits (KV budget, batching, queue, sessions).
  engine::Engine::Options engine;
};

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<engine::Engine> engine;  // must be destroyed before `model`
  std::string backend;
};

// Loads the model, creates the backend with the engine's KV layout and starts the
// engine. Errors name the step that failed (file, backend, engine options).
absl::StatusOr<LoadedModel> LoadModel(const ModelOptions& options);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_MODEL_LOADING_H_
