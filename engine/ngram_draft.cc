#include "engine/ngram_draft.h"

#include <algorithm>
#include <cstddef>

namespace kvserve::engine {

NgramDraftSource::NgramDraftSource(const NgramDraftOptions& options) : options_(options) {
  options_.min_ngram = std::max(options_.min_ngram, 1);
  options_.max_ngram = std::max(options_.max_ngram, options_.min_ngram);
  options_.max_lookback = std::max(options_.max_lookback, 1);
}

void NgramDraftSource::Propose(uint64_t /*request_id*/, std::span<const int32_t> context,
                               int32_t max_tokens, std::vector<int32_t>* out) {
  const ptrdiff_t size = static_cast<ptrdiff_t>(context.size());
  const ptrdiff_t earliest = std::max<ptrdiff_t>(0, size - options_.max_lookback);
  for (ptrdiff_t n = std::min<ptrdiff_t>(options_.max_ngram, size - 1); n >= options_.min_ngram;
       --n) {
    const std::span<const int32_t> suffix = context.subspan(static_cast<size_t>(size - n));
    // An earlier occurrence [start, start + n) followed by at least one token, latest first.
    for (ptrdiff_t start = size - n - 1; start >= earliest; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const ptrdiff_t from = start + n;
      const ptrdiff_t to = std::min<ptrdiff_t>(size, from + max_tokens);
      out->insert(out->end(), context.begin() + from, context.begin() + to);
      return;
    }
  }
}

}  // namespace kvserve::engine
