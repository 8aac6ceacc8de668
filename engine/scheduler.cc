#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

namespace kvserve::engine {

Scheduler::Scheduler(const Options& options, cache::KvCacheManager* kv)
    : options_(options), kv_(kv) {
  options_.max_running_sequences = std::max(options_.max_running_sequences, 1);
  options_.max_step_tokens = std::max(options_.max_step_tokens, 1);
}

void Scheduler::Add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

void Scheduler::OpenTable(Sequence& seq) {
  // At most tokens.size() - 1 positions come from the cache: the last token must run
  // to produce logits.
  const int32_t n = static_cast<int32_t>(seq.tokens.size());
  seq.num_computed = kv_->Open(seq.id, seq.root, seq.tokens, n - 1, /*record_stats=*/false);
  seq.has_table = true;
}

void Scheduler::CloseTable(Sequence& seq) {
  if (!seq.has_table) return;
  kv_->Close(seq.id);
  seq.has_table = false;
  seq.num_computed = 0;
}

void Scheduler::Preempt(std::unique_ptr<Sequence> seq, StepPlan& plan) {
  seq->DropDrafts();
  CloseTable(*seq);
  ++preemptions_total_;
  plan.preempted.push_back(seq.get());
  waiting_.push_front(std::move(seq));
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int32_t budget = options_.max_step_tokens;

  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    // Speculative drafts are reserved last, from free or evictable blocks only: they never
    // cost a session its KV or another sequence its place.
    const int32_t with_drafts = std::min(seq.remaining_tokens(), budget);
    int32_t n = std::min(seq.remaining_tokens() - seq.draft_tokens, budget);
    bool scheduled = true;
    while (!kv_->Reserve(seq.id, seq.num_computed + n)) {
      if (running_.size() == 1) {
        // Alone, with every session block reclaimed and every other block evictable: the pool
        // cannot hold this sequence.
        plan.out_of_blocks.push_back(&seq);
        scheduled = false;
        break;
      }
      std::unique_ptr<Sequence> victim = std::move(running_.back());
      running_.pop_back();
      const bool self = victim.get() == &seq;
      Preempt(std::move(victim), plan);
      if (self) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    if (seq.draft_tokens > 0) {
      if (with_drafts > n &&
          kv_->Reserve(seq.id, seq.num_computed + with_drafts, /*reclaim_sessions=*/false)) {
        n = with_drafts;  // all drafts, or those the budget leaves room for
      } else {
        seq.DropDrafts();
      }
    }
    plan.chunks.push_back({&seq, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences, FIFO (preempted ones were put at the front). Skipped when a
  // running sequence was just preempted: memory is short this step.
  while (plan.preempted.empty() && plan.out_of_blocks.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_running_sequences) {
    Sequence& seq = *waiting_.front();
    if (!seq.has_table) OpenTable(seq);
    const int32_t n = std::min(seq.remaining_tokens(), budget);
    if (!kv_->Reserve(seq.id, seq.num_computed + n)) {
      // Give its cached-prefix references back so they stay evictable while it waits.
      CloseTable(seq);
      if (running_.empty() && plan.chunks.empty()) plan.out_of_blocks.push_back(&seq);
      break;
    }
    // The lookup counts once per admission, not once per attempt.
    const int32_t bt = kv_->block_tokens();
    kv_->RecordPrefixLookup((static_cast<int32_t>(seq.tokens.size()) - 1) / bt,
                            seq.num_computed / bt);
    plan.chunks.push_back({&seq, n});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return plan;
}

std::unique_ptr<Sequence> Scheduler::Remove(RequestId id) {
  for (auto* queue : {&running_, &waiting_}) {
    for (auto it = queue->begin(); it != queue->end(); ++it) {
      if ((*it)->id != id) continue;
      std::unique_ptr<Sequence> seq = std::move(*it);
      queue->erase(it);
      CloseTable(*seq);
      return seq;
    }
  }
  return nullptr;
}

Sequence* Scheduler::Find(RequestId id) const {
  for (const auto* queue : {&running_, &waiting_}) {
    for (const auto& seq : *queue) {
      if (seq->id == id) return seq.get();
    }
  }
  return nullptr;
}

}  // namespace kvserve::engine
