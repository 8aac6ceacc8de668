// A Backend whose logits follow a script: at every step each sequence's logits favour
// the token the script names for its context length, so a greedy request produces
// exactly the scripted tokens. It does no math and never touches KV memory. For engine
// tests of what happens after sampling (end of text, stop ids and strings, UTF-8
// hold-back, flushes) with a real tokenizer, independent of any model's weights.
#ifndef KVSERVE_ENGINE_TESTING_SCRIPTED_BACKEND_H_
#define KVSERVE_ENGINE_TESTING_SCRIPTED_BACKEND_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "model/kv_layout.h"

namespace kvserve::engine::testing {

class ScriptedBackend : public backends::Backend {
 public:
  // `next_token(context_length)`: the token to favour after a context of that many
  // tokens (prompt + tokens generated so far); must be in [0, vocab_size).
  ScriptedBackend(model::KvLayout layout, int32_t vocab_size,
                  std::function<int32_t(int32_t)> next_token)
      : layout_(layout), vocab_size_(vocab_size), next_token_(std::move(next_token)) {}

  std::string name() const override { return "scripted"; }
  const model::KvLayout& kv_layout() const override { return layout_; }

  absl::Status Forward(const backends::Batch& batch, std::span<float> logits) override {
    const size_t vocab = static_cast<size_t>(vocab_size_);
    if (logits.size() < backends::LogitRowCount(batch) * vocab) {
      return absl::InvalidArgumentError("logits too small");
    }
    const std::vector<size_t> starts = backends::LogitRowStarts(batch);
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const backends::SequenceInput& in = batch.sequences[i];
      if (in.tokens.empty()) return absl::InvalidArgumentError("a sequence has no tokens");
      if (!in.want_logits) continue;
      const int32_t end = in.cached_tokens + static_cast<int32_t>(in.tokens.size());
      // Row r: the logits after the context up to the r-th of the last logits_rows tokens.
      for (int32_t r = 0; r < in.logits_rows; ++r) {
        const int32_t token = next_token_(end - in.logits_rows + 1 + r);
        if (token < 0 || token >= vocab_size_) {
          return absl::InvalidArgumentError(absl::StrCat("script token ", token, " out of range"));
        }
        std::span<float> row = logits.subspan((starts[i] + static_cast<size_t>(r)) * vocab, vocab);
        std::fill(row.begin(), row.end(), -10.0f);
        row[static_cast<size_t>(token)] = 10.0f;
      }
    }
    return absl::OkStatus();
  }

 private:
  model::KvLayout layout_;
  int32_t vocab_size_;
  std::function<int32_t(int32_t)> next_token_;
};

}  // namespace kvserve::engine::testing

#endif  // KVSERVE_ENGINE_TESTING_SCRIPTED_BACKEND_H_
