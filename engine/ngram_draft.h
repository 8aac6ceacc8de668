// Prompt lookup (n-gram) drafts: the sequence's own context is the draft model. When the
// last n tokens occurred before, the tokens that followed that earlier occurrence are
// proposed. Costs no model and nothing when the text does not repeat itself; pays off
// for answers that copy their input (code edits, summaries, RAG quotes, repeated text).
#ifndef KVSERVE_ENGINE_NGRAM_DRAFT_H_
#define KVSERVE_ENGINE_NGRAM_DRAFT_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/draft_source.h"

namespace kvserve::engine {

struct NgramDraftOptions {
  // Longest and shortest suffix matched; the longest that matches wins. 1 <= min <= max.
  // Defaults 3 and 1 (as llama.cpp's prompt lookup and vLLM's ngram proposer).
  int32_t max_ngram = 3;
  int32_t min_ngram = 1;
  // How far back a match is searched, in tokens (the cost per proposal is linear in it).
  // Default 4096.
  int32_t max_lookback = 4096;
};

// Stateless: every proposal is a function of the context alone. Among occurrences of
// the suffix the most recent one is used (text that repeats tends to repeat its latest
// form).
class NgramDraftSource final : public DraftSource {
 public:
  explicit NgramDraftSource(const NgramDraftOptions& options);
  std::string_view name() const override { return "ngram"; }
  void Propose(uint64_t request_id, std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* out) override;

 private:
  NgramDraftOptions options_;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_NGRAM_DRAFT_H_
