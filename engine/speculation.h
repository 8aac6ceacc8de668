// Speculative decoding: the server's settings, the choice of draft source, and how long
// a sequence's drafts are. The verification itself is in the engine's step
// (engine.cc: drafts fed with the sequence's next token in one Forward with every
// position's logits, Sampler::SampleDraft per position, rejected positions' K/V left
// behind the sequence's length where the next step overwrites it: never committed to
// the prefix index, exported or kept in a session).
#ifndef KVSERVE_ENGINE_SPECULATION_H_
#define KVSERVE_ENGINE_SPECULATION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/draft_source.h"
#include "engine/ngram_draft.h"
#include "engine/sampling_params.h"  // kMaxDraftTokens

namespace kvserve::engine {

struct SpeculativeOptions {
  // Where drafts come from: "none" (no speculation), "ngram" (prompt lookup,
  // engine/ngram_draft.h) or "draft_model" (a second model, engine/draft_model.h: the
  // caller loads it and passes it as custom_source; engine/model_loading.h does).
  // Default "none".
  std::string source = "none";
  // Most draft tokens per sequence and step, in [1, kMaxDraftTokens]; a request may ask
  // for fewer (SamplingParams::max_draft_tokens). Default 5.
  int32_t draft_max = 5;
  NgramDraftOptions ngram;
  // Speculate only in steps where at most this many sequences decode: a step of more
  // rows is no longer bound by reading the weights, and draft rows there cost as much as
  // real ones. >= 0 (0: never). Default 4.
  int32_t max_batch = 4;
  // Keep drafts only where they are measured faster (engine/speculation_governor.h),
  // re-measuring the other choice every explore_every-th decode step of a batch size
  // (>= 2). false: draft whenever allowed (tests, benchmarks of the mechanism).
  // Defaults true and 32.
  bool adaptive = true;
  int32_t explore_every = 32;
  // A source of the caller's, used instead of `source` when set (tests; drafters built
  // outside the engine). Not owned; must outlive the engine. Default null.
  DraftSource* custom_source = nullptr;
};

// OK, or INVALID_ARGUMENT naming the field ("speculative.draft_max must be in [1, 64],
// got 0").
absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& options);

// The source `options` name when it needs nothing but the options (not custom_source);
// null for "none" and "draft_model".
std::unique_ptr<DraftSource> CreateDraftSource(const SpeculativeOptions& options);

// A sequence's next draft length after a step that verified `verified` drafts of which
// `accepted` were accepted: one more (up to `max`) when all were, else one more than
// were accepted (so a source that stops matching costs one row per step, and one that
// matches again grows back); unchanged when none was verified (the budget cut them).
// `current` 0 means unset: `max`. For a source that paces itself
// (DraftSource::PacesItself: it stopped where it was unsure) `max` when all were
// accepted, else one less than `current` (down to 1), so only repeated rejections
// shorten its drafts.
int32_t NextDraftLength(int32_t current, int32_t verified, int32_t accepted, int32_t max,
                        bool paced = false);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SPECULATION_H_
