// Times a Backend on a model: prefill of one long prompt, and decode steps over a batch of
// concurrent sequences. Token ids are random (seeded), never sampled, so a run never
// stops at an end-of-sequence token.
#ifndef KVSERVE_BENCH_MODEL_RUNNER_H_
#define KVSERVE_BENCH_MODEL_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "model/dtype.h"
#include "model/model.h"

namespace kvserve::bench {

// Weight bytes one batch-1 decode step streams: every matrix once (Q, K, V, O, gate,
// up, down of every layer and the LM head, which is the embedding table when tied)
// plus one embedding row. Norm gains are ignored (a few KB). With experts, the router and
// `experts_used` experts of each layer (those a token reads; all experts of a layer are
// the same size) and the shared experts: the bound of a mixture of experts is its active
// bytes.
uint64_t WeightBytesPerToken(const model::ModelWeights& weights, int experts_used = 0);

// The element type of the model's matrices (that of layer 0's Q projection).
model::DType MatrixDType(const model::ModelWeights& weights);

// Tokens/s of one Forward over a `prompt_tokens`-token prompt of one fresh sequence, once
// per repeat (returns `repeats` samples) after one untimed warm-up run. The KV blocks are
// allocated once and reused.
// INVALID_ARGUMENT for non-positive counts or a prompt beyond the context length; any
// error from the backend.
absl::StatusOr<std::vector<double>> MeasurePrefill(backends::Backend& backend,
                                                   const model::Model& model, int prompt_tokens,
                                                   int repeats, uint64_t seed);

// Aggregate decode tokens/s of `batch` concurrent sequences: each first gets its own
// random prefix of `prefix_tokens` tokens (one untimed Forward for all), then one untimed
// warm-up step and `decode_tokens` timed steps, each step one Batch holding one new token
// per sequence. Tokens/s = batch * decode_tokens / seconds, once per repeat (each repeat
// starts the sequences over). INVALID_ARGUMENT for non-positive counts or when
// prefix + decode + 1 exceeds the context length; any error from the backend.
absl::StatusOr<std::vector<double>> MeasureDecode(backends::Backend& backend,
                                                  const model::Model& model, int batch,
                                                  int prefix_tokens, int decode_tokens, int repeats,
                                                  uint64_t seed);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_MODEL_RUNNER_H_
