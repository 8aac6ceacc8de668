// An independent textbook forward pass in double precision, for tests: the whole
// sequence at once with an explicit attention mask, written from the architecture
// descriptions (llama.cpp's graphs for llama/qwen2, Qwen3's for qwen3, the DeepSeek-V2
// paper's equations for latent attention, decompressed), sharing no code
// with the backends. It is the oracle the reference backend itself is checked against
// for the architecture features (biases, Q/K norms, RoPE factors and scaling) and for
// local attention, and the stand-in for llama.cpp where the peer snapshot lacks an
// architecture (qwen3).
#ifndef KVSERVE_BACKENDS_TESTING_TEXTBOOK_FORWARD_H_
#define KVSERVE_BACKENDS_TESTING_TEXTBOOK_FORWARD_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace kvserve::backends::testing {

// Logits [tokens.size(), vocab] of every position of `tokens` (positions 0, 1, ...), row
// t computed from tokens[0..t] with the mask  j <= t  and, when the config has a sliding
// window W,  t - j < W. Weights of any dtype are dequantised to double first (with
// kernels::RowToFloat, model/dtype.h's exact conversion). An empty or too long sequence
// is INVALID_ARGUMENT. Cost O(n^2 + n * weights): tests only.
absl::StatusOr<std::vector<double>> TextbookForward(const model::Model& model,
                                                    std::span<const int32_t> tokens);

// Greedy continuation of `tokens` by TextbookForward: up to `max_tokens` tokens, each the
// argmax (lowest id on ties) of the last row, appended before the next step; stops before
// `stop_token` when it is >= 0. Errors as TextbookForward.
absl::StatusOr<std::vector<int32_t>> TextbookGreedy(const model::Model& model,
                                                    std::vector<int32_t> tokens, int max_tokens,
                                                    int32_t stop_token = -1);

}  // namespace kvserve::backends::testing

#endif  // KVSERVE_BACKENDS_TESTING_TEXTBOOK_FORWARD_H_
