#include "bench/model_runner.h"

#include <chrono>
#include <random>
#include <span>

#include "absl/strings/str_cat.h"
#include "backends/kv_arena.h"

namespace kvserve::bench {
namespace {

uint64_t MatrixBytes(const model::TensorView& t) {
  return static_cast<uint64_t>(t.rows) * t.row_bytes();
}

// Random ids in [3, vocab): skips <unk>, <s> and </s> of the usual llama vocabularies.
std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n, int vocab_size) {
  const int32_t lo = vocab_size > 3 ? 3 : 0;
  std::uniform_int_distribution<int32_t> dist(lo, vocab_size - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status CheckCounts(const model::Model& model, int sequences, int positions, int repeats) {
  if (sequences <= 0 || positions <= 0 || repeats <= 0) {
    return absl::InvalidArgumentError("batch, token counts and repeats must be positive");
  }
  if (positions > model.config().context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        positions, " positions exceed the context length ", model.config().context_length));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t WeightBytesPerToken(const model::ModelWeights& w, int experts_used) {
  uint64_t bytes = MatrixBytes(w.output) + w.token_embedding.row_bytes();
  for (const model::LayerWeights& l : w.layers) {
    for (const model::TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down,
                                       &l.router, &l.shared_gate, &l.shared_up, &l.shared_down}) {
      bytes += MatrixBytes(*t);
    }
    if (l.expert_gate.empty()) continue;
    bytes += static_cast<uint64_t>(experts_used) *
             (MatrixBytes(l.expert_gate[0]) + MatrixBytes(l.expert_up[0]) +
              MatrixBytes(l.expert_down[0]));
  }
  return bytes;
}

model::DType MatrixDType(const model::ModelWeights& w) {
  return w.layers.empty() ? w.output.type : w.layers[0].wq.type;
}

absl::StatusOr<std::vector<double>> MeasurePrefill(backends::Backend& backend,
                                                   const model::Model& model, int prompt_tokens,
                                                   int repeats, uint64_t seed) {
  if (absl::Status s = CheckCounts(model, 1, prompt_tokens, repeats); !s.ok()) return s;
  const int vocab = model.config().vocab_size;
  std::mt19937_64 rng(seed);
  backends::KvArena arena(backend.kv_layout(), /*populate=*/true);  // as kvserve's pool
  std::span<uint8_t* const> blocks = arena.Allocate(prompt_tokens);
  std::vector<float> logits(static_cast<size_t>(vocab));  // [1, vocab]
  std::vector<double> samples;
  // Run 0 is an untimed warm-up: it faults in the mapped weights and lets the backend
  // size its scratch buffers.
  for (int r = 0; r <= repeats; ++r) {
    const std::vector<int32_t> prompt = RandomTokens(rng, prompt_tokens, vocab);
    backends::Batch batch;
    batch.sequences.push_back(backends::SequenceInput{prompt, 0, blocks, true});
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = backend.Forward(batch, logits); !s.ok()) return s;
    if (r > 0) samples.push_back(prompt_tokens / Seconds(start));
  }
  return samples;
}

absl::StatusOr<std::vector<double>> MeasureDecode(backends::Backend& backend,
                                                  const model::Model& model, int batch,
                                                  int prefix_tokens, int decode_tokens, int repeats,
                                                  uint64_t seed) {
  if (absl::Status s = CheckCounts(model, batch, prefix_tokens + decode_tokens + 1, repeats);
      !s.ok()) {
    return s;
  }
  if (prefix_tokens <= 0 || decode_tokens <= 0) {
    return absl::InvalidArgumentError("prefix and decode token counts must be positive");
  }
  const int vocab = model.config().vocab_size;
  const size_t n = static_cast<size_t>(batch);
  std::mt19937_64 rng(seed);
  backends::KvArena arena(backend.kv_layout(), /*populate=*/true);  // as kvserve's pool
  std::vector<std::span<uint8_t* const>> blocks;                    // [batch]
  for (size_t i = 0; i < n; ++i)
    blocks.push_back(arena.Allocate(prefix_tokens + decode_tokens + 1));
  std::vector<float> logits(n * static_cast<size_t>(vocab));  // [batch, vocab]
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    // Every sequence's own prefix, all in one untimed step.
    std::vector<std::vector<int32_t>> prefixes;  // [batch][prefix_tokens]
    prefixes.reserve(n);                         // the spans below point into the inner vectors
    backends::Batch prefill;
    for (size_t i = 0; i < n; ++i) {
      prefixes.push_back(RandomTokens(rng, prefix_tokens, vocab));
      prefill.sequences.push_back(backends::SequenceInput{prefixes.back(), 0, blocks[i], true});
    }
    if (absl::Status s = backend.Forward(prefill, logits); !s.ok()) return s;

    // The decode tokens are drawn up front so the timed loop does only Forward calls.
    // Step 0 is an untimed warm-up of the decode shape.
    const std::vector<int32_t> next =
        RandomTokens(rng, batch * (decode_tokens + 1), vocab);  // [steps + 1, batch]
    backends::Batch step;
    for (size_t i = 0; i < n; ++i) {
      step.sequences.push_back(backends::SequenceInput{{}, prefix_tokens, blocks[i], true});
    }
    auto start = std::chrono::steady_clock::now();
    for (int t = 0; t <= decode_tokens; ++t) {
      for (size_t i = 0; i < n; ++i) {
        backends::SequenceInput& seq = step.sequences[i];
        seq.tokens = std::span<const int32_t>(&next[static_cast<size_t>(t) * n + i], 1);
        seq.cached_tokens = prefix_tokens + t;
      }
      if (absl::Status s = backend.Forward(step, logits); !s.ok()) return s;
      if (t == 0) start = std::chrono::steady_clock::now();
    }
    samples.push_back(static_cast<double>(batch) * decode_tokens / Seconds(start));
  }
  return samples;
}

}  // namespace kvserve::bench
