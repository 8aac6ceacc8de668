// Speculative decoding's proposers: where draft tokens come from. The engine asks a
// DraftSource for up to k tokens to follow a sequence's context, feeds them with the
// sequence's next token in one Forward (every position's logits), and keeps the longest
// prefix the target model agrees with (Sampler::SampleDraft), so the output is the
// target's whatever the source proposes; a better source only makes it faster.
#ifndef KVSERVE_ENGINE_DRAFT_SOURCE_H_
#define KVSERVE_ENGINE_DRAFT_SOURCE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvserve::engine {

// Threading: called from the engine's step thread only.
// Proposals are deterministic functions of what the source has seen (Sampler::
// SampleDraft treats a draft as a one-hot proposal). A source that keeps per-sequence
// state (a draft model's KV, an MTP head's hidden state) keys it by the request id.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // The source's name in metrics and logs ("ngram", "draft_model").
  virtual std::string_view name() const = 0;
  // True when Propose stops on its own where its drafts turn unlikely to be accepted (a
  // draft model's confidence): the engine then asks for the longest draft allowed again
  // after a fully accepted one and shortens by one token per rejection, rather than to
  // the length last accepted (NextDraftLength). Default false.
  virtual bool PacesItself() const { return false; }
  // Appends at most `max_tokens` (>= 1) proposed continuations of `context` (the
  // sequence's prompt and generated tokens) to `out`; appending none is allowed (no
  // proposal: the sequence decodes one token this step).
  virtual void Propose(uint64_t request_id, std::span<const int32_t> context, int32_t max_tokens,
                       std::vector<int32_t>* out) = 0;
  // The prompt of `request_id` is computed and `context` is its prompt and first token:
  // a source with per-sequence state (a draft model's K/V) may compute it now, in the
  // step that ended the prefill, so that the decode steps (whose speed the engine
  // compares with and without drafts) carry only the per-token work. Default: nothing.
  virtual void Prepare(uint64_t request_id, std::span<const int32_t> context) {
    (void)request_id;
    (void)context;
  }
  // The sequence of `request_id` finished: drop its state. (A preempted sequence keeps
  // it: it resumes from the same tokens.)
  virtual void Forget(uint64_t request_id) { (void)request_id; }
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_DRAFT_SOURCE_H_
