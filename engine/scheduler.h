// Iteration-level continuous batching: which sequences run in the next step, and how
// many of their tokens.
#ifndef KVSERVE_ENGINE_SCHEDULER_H_
#define KVSERVE_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/sequence.h"

namespace kvserve::engine {

// One step, as plain data.
struct StepPlan {
  struct Chunk {
    Sequence* seq = nullptr;
    int32_t num_tokens = 0;  // tokens [seq->num_computed, + num_tokens) run this step
  };
  std::vector<Chunk> chunks;
  // Running sequences pushed back to the waiting queue this step (KV released; they
  // are recomputed from their tokens, reusing whatever blocks are still cached).
  std::vector<Sequence*> preempted;
  // Sequences that cannot get the blocks for their next token even with every other
  // sequence preempted and every session block reclaimed: the pool is too small. The
  // caller finishes them (kLength) and Remove()s them.
  std::vector<Sequence*> out_of_blocks;
};

// Policy (as vLLM v1, minus the knobs): running sequences first, oldest first, each
// gets all its remaining tokens (1 when decoding; a prompt chunk when prefilling) up to
// the step's token budget. When the pool cannot supply a running sequence's blocks
// (KvCacheManager::Reserve has already taken back session blocks), the youngest running
// sequence is preempted; a sequence that would preempt itself waits for the next step.
// Then waiting sequences, in FIFO order with preempted ones at the front, are admitted
// while the budget, the running limit and the pool allow: each starts from its longest
// cached prefix. The head of the queue is never skipped, so nobody starves.
// Speculative drafts (Sequence::draft_tokens) are reserved after the sequence's real
// token, from free or evictable blocks only (no session is reclaimed, nobody preempted for
// them), may be cut by the budget (the chunk then verifies fewer) and are dropped when
// neither leaves room; a preempted sequence loses its drafts.
//
// Threading: not thread-safe; owned by the engine's step thread.
class Scheduler {
 public:
  struct Options {
    int32_t max_running_sequences = 64;  // >= 1
    int32_t max_step_tokens = 512;       // >= 1, chunked prefill budget
  };

  // `kv` must outlive the scheduler.
  Scheduler(const Options& options, cache::KvCacheManager* kv);

  // Queues a new sequence at the back of the waiting queue.
  void Add(std::unique_ptr<Sequence> seq);

  // Plans the next step. Reserves every block the planned chunks write.
  StepPlan Schedule();

  // Removes a sequence (waiting or running), releasing its blocks. nullptr if unknown.
  std::unique_ptr<Sequence> Remove(RequestId id);
  Sequence* Find(RequestId id) const;

  const std::deque<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  int64_t preemptions_total() const { return preemptions_total_; }

 private:
  void Preempt(std::unique_ptr<Sequence> seq, StepPlan& plan);
  void OpenTable(Sequence& seq);
  void CloseTable(Sequence& seq);

  Options options_;
  cache::KvCacheManager* kv_;
  std::deque<std::unique_ptr<Sequence>> running_;  // admission order: oldest first
  std::deque<std::unique_ptr<Sequence>> waiting_;
  int64_t preemptions_total_ = 0;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_SCHEDULER_H_
