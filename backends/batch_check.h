// Validation of a Backend::Forward batch, shared by every backend so that they reject
// exactly the same inputs with the same messages.
#ifndef KVSERVE_BACKENDS_BATCH_CHECK_H_
#define KVSERVE_BACKENDS_BATCH_CHECK_H_

#include <span>

#include "absl/status/status.h"
#include "backends/backend.h"
#include "model/kv_layout.h"
#include "model/model_config.h"

namespace kvserve::backends {

// OK when `batch` can run: every sequence has at least one token, every token id is in
// [0, vocab_size), 0 <= cached_tokens and cached_tokens + tokens.size() <= context_length,
// the blocks cover every position up to cached_tokens + tokens.size() (non-null from the
// block of config.FirstVisiblePosition(cached_tokens) on: with a sliding window earlier
// blocks are never read and may be null), and
// 1 <= logits_rows <= tokens.size(), and `logits_size` >= LogitRowCount(batch) *
// vocab_size. Otherwise INVALID_ARGUMENT whose
// message names the sequence index ("sequence 2: token 7 has id 600, vocab size is 512").
// An empty batch is OK (nothing to do).
absl::Status ValidateBatch(const model::ModelConfig& config, const model::KvLayout& layout,
                           const Batch& batch, size_t logits_size);

// OK when `layout` fits `config` (same n_layers, kv_dim and planes, block_tokens > 0, dtype f32
// or f16); otherwise INVALID_ARGUMENT naming the field. Backends call it on creation.
absl::Status ValidateKvLayout(const model::ModelConfig& config, const model::KvLayout& layout);

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_BATCH_CHECK_H_
