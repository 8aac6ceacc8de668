#include "backends/batch_check.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "model/dtype.h"

namespace kvserve::backends {

absl::Status ValidateBatch(const model::ModelConfig& config, const model::KvLayout& layout,
                           const Batch& batch, size_t logits_size) {
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& seq = batch.sequences[i];
    const std::string where = absl::StrCat("sequence ", i, ": ");
    if (seq.tokens.empty()) return absl::InvalidArgumentError(where + "has no new tokens");
    if (seq.logits_rows < 1 || static_cast<size_t>(seq.logits_rows) > seq.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "logits_rows ", seq.logits_rows,
                                                     " is out of [1, ", seq.tokens.size(), "]"));
    }
    if (seq.cached_tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "cached_tokens is negative (", seq.cached_tokens, ")"));
    }
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      if (seq.tokens[t] < 0 || seq.tokens[t] >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "token ", t, " has id ", seq.tokens[t], ", vocab size is ", config.vocab_size));
      }
    }
    const int64_t end =
        static_cast<int64_t>(seq.cached_tokens) + static_cast<int64_t>(seq.tokens.size());
    if (end > config.context_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "positions up to ", end, " exceed the context length ", config.context_length));
    }
    const int64_t blocks_needed = (end + layout.block_tokens - 1) / layout.block_tokens;
    if (static_cast<int64_t>(seq.blocks.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(where, seq.blocks.size(), " KV blocks of ",
                                                     layout.block_tokens, " tokens cannot hold ",
                                                     end, " positions"));
    }
    // With local attention the blocks wholly before the first new token's window are
    // never read and may be null (the KV cache gave them back to the pool).
    const int64_t first_block =
        config.FirstVisiblePosition(seq.cached_tokens) / layout.block_tokens;
    for (int64_t b = first_block; b < blocks_needed; ++b) {
      if (seq.blocks[static_cast<size_t>(b)] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(where, "KV block ", b, " is null"));
      }
    }
  }
  // Checked last: the row count is only meaningful once every logits_rows is in range.
  const size_t needed_logits = LogitRowCount(batch) * static_cast<size_t>(config.vocab_size);
  if (logits_size < needed_logits) {
    return absl::InvalidArgumentError(absl::StrCat("logits holds ", logits_size,
                                                   " floats, batch of ", batch.sequences.size(),
                                                   " sequences needs ", needed_logits));
  }
  return absl::OkStatus();
}

absl::Status ValidateKvLayout(const model::ModelConfig& config, const model::KvLayout& layout) {
  if (layout.n_layers != config.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv layout: n_layers ", layout.n_layers, " != model's ", config.n_layers));
  }
  if (layout.kv_dim != config.kv_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv layout: kv_dim ", layout.kv_dim, " != model's ", config.kv_dim()));
  }
  if (layout.planes != config.kv_planes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv layout: ", layout.planes, " planes != model's ", config.kv_planes()));
  }
  if (layout.block_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv layout: block_tokens must be positive, got ", layout.block_tokens));
  }
  if (layout.dtype != model::DType::kF32 && layout.dtype != model::DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("kv layout: dtype must be f32 or f16, got ",
                                                   std::string(model::DTypeName(layout.dtype))));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::backends
