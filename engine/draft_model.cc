#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve::engine {
namespace {

absl::Status Mismatch(std::string_view what, std::string_view target, std::string_view draft) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "draft model vocabulary differs from the target's: %s \"%s\" vs \"%s\" (target vs draft)",
      what, absl::CHexEscape(absl::string_view(target.data(), target.size())),
      absl::CHexEscape(absl::string_view(draft.data(), draft.size()))));
}

absl::Status Mismatch(std::string_view what, int64_t target, int64_t draft) {
  return Mismatch(what, absl::StrCat(target), absl::StrCat(draft));
}

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The first largest logit's index and its lead over the largest of the others (0 on a
// tie), in one pass. Precondition: logits is not empty.
std::pair<int32_t, float> ArgmaxAndMargin(std::span<const float> logits) {
  size_t best = 0;
  float runner_up = -std::numeric_limits<float>::infinity();
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) {
      runner_up = logits[best];
      best = i;
    } else if (logits[i] > runner_up) {
      runner_up = logits[i];
    }
  }
  return {static_cast<int32_t>(best), logits[best] - runner_up};
}

}  // namespace

absl::Status CheckDraftVocabulary(const model::Vocabulary& target, const model::Vocabulary& draft) {
  if (target.model != draft.model || target.tokenizer_model != draft.tokenizer_model) {
    return Mismatch("tokenizer model", target.tokenizer_model, draft.tokenizer_model);
  }
  if (target.pre_tokenizer != draft.pre_tokenizer) {
    return Mismatch("pre-tokenizer", target.pre_tokenizer, draft.pre_tokenizer);
  }
  if (target.bos_id != draft.bos_id) return Mismatch("BOS id", target.bos_id, draft.bos_id);
  if (target.eos_id != draft.eos_id) return Mismatch("EOS id", target.eos_id, draft.eos_id);
  if (target.unk_id != draft.unk_id) return Mismatch("UNK id", target.unk_id, draft.unk_id);
  if (target.size() != draft.size()) {
    return Mismatch("number of tokens", target.size(), draft.size());
  }
  for (int32_t id = 0; id < target.size(); ++id) {
    const size_t i = static_cast<size_t>(id);
    if (target.pieces[i] != draft.pieces[i]) {
      return Mismatch(absl::StrCat("text of token ", id), target.pieces[i], draft.pieces[i]);
    }
    if (target.kinds[i] != draft.kinds[i]) {
      return Mismatch(absl::StrCat("kind of token ", id), static_cast<int64_t>(target.kinds[i]),
                      static_cast<int64_t>(draft.kinds[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftModelSource>> DraftModelSource::Create(
    const model::Model& target, std::unique_ptr<model::Model> draft,
    std::unique_ptr<backends::Backend> backend, const DraftModelOptions& options) {
  if (draft == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("draft model: a model and its backend are required");
  }
  if (options.max_chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_model.max_chunk_tokens must be >= 1, got ", options.max_chunk_tokens));
  }
  if (!(options.min_margin >= 0.0) || !std::isfinite(options.min_margin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_model.min_margin must be finite and >= 0, got ", options.min_margin));
  }
  if (!(options.min_acceptance >= 0.0 && options.min_acceptance < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_model.min_acceptance must be in [0, 1), got ", options.min_acceptance));
  }
  if (options.max_kept_sequences < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft_model.max_kept_sequences must be >= 0, got ", options.max_kept_sequences));
  }
  if (absl::Status s = CheckDraftVocabulary(target.vocab(), draft->vocab()); !s.ok()) return s;
  const size_t block_bytes = backend->kv_layout().block_bytes();
  const int64_t blocks = options.kv_bytes / static_cast<int64_t>(block_bytes);
  if (blocks < 2) {
    return absl::ResourceExhaustedError(absl::StrCat("draft_model.kv_bytes (", options.kv_bytes,
                                                     ") must hold at least two K/V ", "blocks of ",
                                                     block_bytes, " bytes"));
  }
  absl::StatusOr<common::HugePageMemory> storage =
      common::HugePageMemory::Allocate(static_cast<size_t>(blocks) * block_bytes);
  if (!storage.ok()) return storage.status();
  return std::unique_ptr<DraftModelSource>(
      new DraftModelSource(std::move(draft), std::move(backend), options, *std::move(storage)));
}

DraftModelSource::DraftModelSource(std::unique_ptr<model::Model> model,
                                   std::unique_ptr<backends::Backend> backend,
                                   const DraftModelOptions& options, common::HugePageMemory storage)
    : model_(std::move(model)),
      backend_(std::move(backend)),
      options_(options),
      block_bytes_(backend_->kv_layout().block_bytes()),
      block_tokens_(backend_->kv_layout().block_tokens),
      storage_(std::move(storage)),
      logits_(static_cast<size_t>(model_->config().vocab_size)) {
  const size_t blocks = storage_.size() / block_bytes_;
  free_blocks_.reserve(blocks);
  for (size_t b = blocks; b-- > 0;) free_blocks_.push_back(storage_.data() + b * block_bytes_);
}

DraftModelSource::Track& DraftModelSource::TrackFor(uint64_t request_id,
                                                    std::span<const int32_t> context) {
  if (auto it = active_.find(request_id); it != active_.end()) return it->second;
  // A follow-up turn (or a request repeating a prompt): continue the finished sequence
  // whose tokens share the longest prefix with this context.
  size_t best = 0;
  auto best_it = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    const size_t common = CommonPrefix(it->tokens, context);
    if (common > best) {
      best = common;
      best_it = it;
    }
  }
  Track& track = active_[request_id];
  if (best_it != kept_.end()) {
    track = std::move(*best_it);
    kept_.erase(best_it);
  }
  return track;
}

void DraftModelSource::DropOldestKept() {
  auto lru = std::min_element(kept_.begin(), kept_.end(), [](const Track& a, const Track& b) {
    return a.last_used < b.last_used;
  });
  Release(*lru);
  kept_.erase(lru);
}

void DraftModelSource::Release(Track& track) {
  free_blocks_.insert(free_blocks_.end(), track.blocks.begin(), track.blocks.end());
  track.blocks.clear();
  track.tokens.clear();
}

bool DraftModelSource::Reserve(Track& track, int64_t positions) {
  const size_t needed = static_cast<size_t>((positions + block_tokens_ - 1) / block_tokens_);
  while (track.blocks.size() + free_blocks_.size() < needed) {
    // Out of blocks: the least recently used kept sequence goes first, then the least
    // recently used other active one (its K/V is recomputed if it drafts again).
    if (!kept_.empty()) {
      DropOldestKept();
      continue;
    }
    Track* victim = nullptr;
    for (auto& [id, other] : active_) {
      if (&other == &track || other.blocks.empty()) continue;
      if (victim == nullptr || other.last_used < victim->last_used) victim = &other;
    }
    if (victim == nullptr) return false;
    Release(*victim);
  }
  while (track.blocks.size() < needed) {
    track.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

absl::Status DraftModelSource::Feed(Track& track, std::span<const int32_t> tokens, bool want_next,
                                    Next* next) {
  backends::Batch batch;
  batch.sequences.resize(1);
  backends::SequenceInput& in = batch.sequences[0];
  in.tokens = tokens;
  in.cached_tokens = static_cast<int32_t>(track.tokens.size());
  in.blocks = track.blocks;
  in.want_logits = want_next;
  if (absl::Status s = backend_->Forward(batch, std::span<float>(logits_)); !s.ok()) return s;
  track.tokens.insert(track.tokens.end(), tokens.begin(), tokens.end());
  if (want_next) std::tie(next->token, next->margin) = ArgmaxAndMargin(logits_);
  return absl::OkStatus();
}

void DraftModelSource::Propose(uint64_t request_id, std::span<const int32_t> context,
                               int32_t max_tokens, std::vector<int32_t>* out) {
  if (context.empty() || max_tokens < 1) return;
  Track& track = TrackFor(request_id, context);
  track.last_used = ++clock_;
  Learn(track, context);
  // Keep what the draft model computed of this context (its rejected drafts are past
  // the common prefix); at least the last context token is fed again, for its logits.
  track.tokens.resize(std::min(CommonPrefix(track.tokens, context), context.size() - 1));
  // Drafts 1..k-1 are fed after the context; the last one is only proposed.
  const int64_t room = int64_t{model_->config().context_length} - std::ssize(context);
  const int32_t k = static_cast<int32_t>(std::min<int64_t>(max_tokens, room + 1));
  if (k < 1 || !Reserve(track, std::ssize(context) + k - 1)) return;
  Next next;
  absl::Status status = CatchUp(track, context, /*want_next=*/true, &next);
  const size_t first = out->size();
  track.drafted_leads.clear();
  while (status.ok()) {
    out->push_back(next.token);
    track.drafted_leads.push_back(next.margin);
    if (out->size() - first >= static_cast<size_t>(k)) break;
    // A near-tie, or a lead whose drafts were mostly rejected: the target likely picks
    // another token, and drafting on would be wasted work.
    if (next.margin < options_.min_margin ||
        (options_.min_acceptance > 0.0 &&
         calibration_.Estimate(next.margin) < options_.min_acceptance)) {
      break;
    }
    status = Feed(track, std::span(&out->back(), 1), true, &next);
  }
  track.drafted_at = context.size();
  track.drafted.assign(out->begin() + static_cast<ptrdiff_t>(first), out->end());
  if (!status.ok()) {
    // The draft model failed (it should not: positions and blocks were checked): no
    // proposal, and its K/V of this sequence is recomputed next time.
    out->resize(first);
    track.tokens.clear();
    track.drafted.clear();
  }
}

absl::Status DraftModelSource::CatchUp(Track& track, std::span<const int32_t> context,
                                       bool want_next, Next* next) {
  for (size_t fed = track.tokens.size(); fed < context.size();) {
    const size_t n = std::min(context.size() - fed, static_cast<size_t>(options_.max_chunk_tokens));
    const bool last = fed + n == context.size();
    if (absl::Status s = Feed(track, context.subspan(fed, n), want_next && last, next); !s.ok()) {
      return s;
    }
    context_tokens_fed_ += static_cast<int64_t>(n);
    fed += n;
  }
  return absl::OkStatus();
}

void DraftModelSource::Prepare(uint64_t request_id, std::span<const int32_t> context) {
  if (context.empty()) return;
  Track& track = TrackFor(request_id, context);
  track.last_used = ++clock_;
  // All but the last token: the next Propose feeds that one for its logits.
  const std::span<const int32_t> head = context.first(context.size() - 1);
  track.tokens.resize(CommonPrefix(track.tokens, head));
  if (std::ssize(head) > int64_t{model_->config().context_length} ||
      !Reserve(track, std::ssize(head))) {
    return;
  }
  if (!CatchUp(track, head, /*want_next=*/false, nullptr).ok()) track.tokens.clear();
}

void DraftModelSource::Learn(Track& track, std::span<const int32_t> context) {
  for (size_t i = 0; i < track.drafted.size() && i < track.drafted_leads.size(); ++i) {
    const size_t position = track.drafted_at + i;
    if (position >= context.size()) break;
    const bool accepted = context[position] == track.drafted[i];
    calibration_.Record(track.drafted_leads[i], accepted);
    if (!accepted) break;
  }
  track.drafted.clear();
  track.drafted_leads.clear();
}

void DraftModelSource::Forget(uint64_t request_id) {
  auto it = active_.find(request_id);
  if (it == active_.end()) return;
  Track track = std::move(it->second);
  active_.erase(it);
  // A follow-up turn's context continues with new input, not with the target's choice.
  track.drafted.clear();
  track.drafted_leads.clear();
  if (track.tokens.empty() || options_.max_kept_sequences == 0) {
    Release(track);
    return;
  }
  if (std::ssize(kept_) >= options_.max_kept_sequences) DropOldestKept();
  kept_.push_back(std::move(track));
}

}  // namespace kvserve::engine
