#include "engine/speculation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {

absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& o) {
  if (o.source != "none" && o.source != "ngram" && o.source != "draft_model") {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculative.source must be none, ngram or draft_model, got \"", o.source, "\""));
  }
  if (o.draft_max < 1 || o.draft_max > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("speculative.draft_max must be in [1, ",
                                                   kMaxDraftTokens, "], got ", o.draft_max));
  }
  if (o.ngram.min_ngram < 1 || o.ngram.max_ngram < o.ngram.min_ngram || o.ngram.max_ngram > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative.ngram needs 1 <= min_ngram <= max_ngram <= 64, got ",
                     o.ngram.min_ngram, " and ", o.ngram.max_ngram));
  }
  if (o.ngram.max_lookback < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative.ngram.max_lookback must be >= 1, got ", o.ngram.max_lookback));
  }
  if (o.explore_every < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative.explore_every must be >= 2, got ", o.explore_every));
  }
  if (o.max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative.max_batch must be >= 0, got ", o.max_batch));
  }
  return absl::OkStatus();
}

std::unique_ptr<DraftSource> CreateDraftSource(const SpeculativeOptions& options) {
  if (options.source == "ngram") return std::make_unique<NgramDraftSource>(options.ngram);
  return nullptr;
}

int32_t NextDraftLength(int32_t current, int32_t verified, int32_t accepted, int32_t max,
                        bool paced) {
  if (current <= 0) current = max;
  if (verified <= 0) return std::min(current, max);  // nothing learnt (the budget cut them)
  if (paced) return accepted >= verified ? max : std::clamp(current - 1, 1, max);
  if (accepted >= verified) return std::min(max, current + 1);
  return std::clamp(accepted + 1, 1, max);
}

}  // namespace kvserve::engine
