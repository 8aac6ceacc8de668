// Single-sequence generation straight on a Backend, without the engine's scheduler or
// block pool: the loop behind `kvserve-bench generate` and the golden tests.
#ifndef KVSERVE_ENGINE_OFFLINE_GENERATE_H_
#define KVSERVE_ENGINE_OFFLINE_GENERATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/finish_reason.h"
#include "engine/sampling_params.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::engine {

struct OfflineGenerateOptions {
  std::string backend = "cpu_blas";            // backends::CreateBackend name
  int threads = 0;                             // BackendOptions::threads; 0 = all cores
  model::DType kv_dtype = model::DType::kF16;  // kF16 (default) or kF32
  int kv_block_tokens = 16;                    // positions per KV block
  SamplingParams sampling;                     // max_tokens counts generated tokens
  uint64_t fallback_seed = 0;                  // RNG seed when sampling.seed is empty
  bool echo_prompt = true;                     // pass the decoded prompt to on_text first
  bool parse_special = false;  // control-token strings in the prompt become those tokens
};

struct OfflineGenerateResult {
  std::vector<int32_t> prompt_tokens;     // BOS (when the vocabulary adds one) + prompt
  std::vector<int32_t> generated_tokens;  // every sampled token, including a final stop token
  // kStop (EOS or a stop token id), kStopString or kLength (max_tokens generated, or the
  // model's context is full); the rules are OutputProcessor's, as in the engine.
  FinishReason finish = FinishReason::kLength;
  double prefill_seconds = 0.0;  // the one Forward over the whole prompt
  double decode_seconds = 0.0;   // first sampled token -> last sampled token
                                 // (generated_tokens.size() - 1 single-token steps)
};

// Encodes `prompt` (with BOS when the vocabulary asks for it), prefills it in one
// Forward, then samples and feeds one token at a time until a stop condition. Text is
// passed to `on_text` as it becomes final, exactly as the engine streams it
// (engine/output_processor.h): UTF-8 safe, with any stop string (and text after it)
// removed; stop tokens produce no text.
// Generation is capped so that prompt + generated tokens fit the model's context.
// Runs entirely on the calling thread (on_text included) and blocks until the end; it
// creates its own backend and KV blocks, so concurrent calls share only `model` and
// `tokenizer`, which are immutable.
// Errors: INVALID_ARGUMENT for bad sampling parameters (the message names the field),
// or a prompt that leaves no room in the context; NOT_FOUND for an unknown backend;
// whatever the backend's Forward returns.
absl::StatusOr<OfflineGenerateResult> GenerateOffline(
    const model::Model& model, const model::Tokenizer& tokenizer, std::string_view prompt,
    const OfflineGenerateOptions& options, absl::FunctionRef<void(std::string_view)> on_text);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_OFFLINE_GENERATE_H_
