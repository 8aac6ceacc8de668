// A draft model as speculative decoding's proposer: a second, smaller (or quantized)
// model with the target's vocabulary proposes its greedy continuation of a sequence's
// context. It keeps its own K/V per sequence in a small pool of its own, in step with
// the target: each proposal first feeds the context tokens it has not seen (the tokens
// accepted and sampled since its last proposal, as one chunk), then runs one-token
// steps for the drafts. Positions of rejected drafts are rolled back by length, as the
// target's are. A finished sequence's K/V is kept (least recently used first out), so
// the next turn of a conversation, whose context starts with the last one's, continues
// from it instead of recomputing the history.
#ifndef KVSERVE_ENGINE_DRAFT_MODEL_H_
#define KVSERVE_ENGINE_DRAFT_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "common/huge_page_memory.h"
#include "engine/draft_source.h"
#include "engine/lead_calibration.h"
#include "model/model.h"
#include "model/vocabulary.h"

namespace kvserve::engine {

struct DraftModelOptions {
  // Memory for the draft model's K/V, bytes (sequences decoding now and the finished
  // ones kept for their next turn). A sequence longer than it holds gets no drafts.
  // Default 256 MiB (about 7,000 positions of an s110m-shaped draft with f16 K/V).
  int64_t kv_bytes = int64_t{256} << 20;
  // Most context tokens fed to the draft model in one Forward while it catches up with
  // a sequence (a long prompt is fed in chunks of this many). >= 1. Default 512.
  int32_t max_chunk_tokens = 512;
  // Finished sequences whose K/V is kept for a follow-up turn, >= 0. Default 64.
  int32_t max_kept_sequences = 64;
  // Confidence: after a draft token whose logit leads the runner-up's by less than this
  // (the two likeliest tokens within a factor e^min_margin in probability), no further
  // token is drafted in that step. Such near-ties are where a quantized draft and its
  // target part ways: of a q8_0 tl1b draft's tokens under its f32 target, 46 % with a
  // lead below 0.02 were accepted, 98 % of those above 0.15 (docs/performance.md). But
  // the scale of the leads is the model's: 0.05 gains 4-5 % on tl1b and loses 13 % on
  // s110m. >= 0 and finite; 0 drafts as many as asked. Default 0 (off).
  double min_margin = 0.0;
  // Confidence, learnt: after a draft token whose lead's measured acceptance
  // (LeadCalibration, from the outcomes of this source's earlier proposals) is below
  // this, no further token is drafted in that step. In [0, 1); 0 = off. Default 0.
  double min_acceptance = 0.0;
};

// OK when a model with vocabulary `draft` can propose tokens to one with `target`: the
// same tokenizer algorithm and pre-tokenizer, the same BOS/EOS/UNK ids and the same
// number of tokens with the same text and kind. FAILED_PRECONDITION naming the first
// difference otherwise ("draft model vocabulary differs from the target's at token
// 17: \"▁the\" vs \"the\"").
absl::Status CheckDraftVocabulary(const model::Vocabulary& target, const model::Vocabulary& draft);

// Threading: the engine's step thread only (DraftSource).
class DraftModelSource final : public DraftSource {
 public:
  // `backend` must have been created for `*draft`. Checks the vocabularies
  // (CheckDraftVocabulary against `target`), INVALID_ARGUMENT for options out of range,
  // RESOURCE_EXHAUSTED when options.kv_bytes holds fewer than two K/V blocks.
  static absl::StatusOr<std::unique_ptr<DraftModelSource>> Create(
      const model::Model& target, std::unique_ptr<model::Model> draft,
      std::unique_ptr<backends::Backend> backend, const DraftModelOptions& options);

  std::string_view name() const override { return "draft_model"; }
  // Stops early after a token drafted with little confidence (options.min_margin,
  // options.min_acceptance).
  bool PacesItself() const override {
    return options_.min_margin > 0.0 || options_.min_acceptance > 0.0;
  }
  // Proposes nothing when the draft model cannot hold the positions (its context length,
  // or its K/V pool even after dropping every other sequence's) or its Forward fails.
  void Propose(uint64_t request_id, std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* out) override;
  // Feeds the context but its last token to the draft model (when its pool and context
  // length hold them), so the next Propose feeds one token before drafting.
  void Prepare(uint64_t request_id, std::span<const int32_t> context) override;
  void Forget(uint64_t request_id) override;

  const model::Model& model() const { return *model_; }
  // Context tokens fed to the draft model so far (catching up with contexts, not
  // counting the draft steps): what keeping finished sequences saves shows here.
  int64_t context_tokens_fed() const { return context_tokens_fed_; }
  // The acceptance per lead learnt so far.
  const LeadCalibration& calibration() const { return calibration_; }

 private:
  // One sequence's K/V in the draft model: positions [0, tokens.size()) are computed.
  struct Track {
    std::vector<int32_t> tokens;
    std::vector<uint8_t*> blocks;
    uint64_t last_used = 0;
    // The last proposal (made after `drafted_at` context tokens) and each token's lead,
    // until the next Propose learns from what the sequence kept.
    size_t drafted_at = 0;
    std::vector<int32_t> drafted;
    std::vector<float> drafted_leads;
  };

  DraftModelSource(std::unique_ptr<model::Model> model, std::unique_ptr<backends::Backend> backend,
                   const DraftModelOptions& options, common::HugePageMemory storage);

  // The track for `request_id`: its own, or the kept one sharing the longest prefix with
  // `context`, or a new empty one.
  Track& TrackFor(uint64_t request_id, std::span<const int32_t> context);
  // Gives `track` blocks for `positions` positions, taking them from kept tracks and then
  // from other sequences' (least recently used first). False when the pool is too small.
  bool Reserve(Track& track, int64_t positions);
  void Release(Track& track);
  // Records the outcome of `track`'s last proposal in calibration_: its tokens up to the
  // first that `context` does not repeat (that one rejected), as far as context reaches.
  void Learn(Track& track, std::span<const int32_t> context);
  // Releases the least recently used kept track. Precondition: kept_ is not empty.
  void DropOldestKept();
  // The draft model's greedy next token (lowest id among equal logits) and its logit's
  // lead over the runner-up's (0 on a tie).
  struct Next {
    int32_t token = -1;
    float margin = 0.0f;
  };
  // Runs `tokens` after track.tokens through the draft model; the token after them in
  // *next when `want_next`.
  absl::Status Feed(Track& track, std::span<const int32_t> tokens, bool want_next, Next* next);
  // Feeds context[track.tokens.size(), end) in chunks of max_chunk_tokens; the token
  // after it in *next when `want_next`.
  absl::Status CatchUp(Track& track, std::span<const int32_t> context, bool want_next, Next* next);

  // Declared in destruction order: the backend reads the model's weights.
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<backends::Backend> backend_;
  DraftModelOptions options_;
  size_t block_bytes_;
  int32_t block_tokens_;
  common::HugePageMemory storage_;
  std::vector<uint8_t*> free_blocks_;
  absl::flat_hash_map<uint64_t, Track> active_;
  std::vector<Track> kept_;
  std::vector<float> logits_;
  LeadCalibration calibration_;
  uint64_t clock_ = 0;
  int64_t context_tokens_fed_ = 0;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_DRAFT_MODEL_H_
