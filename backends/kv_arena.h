// A simple owner of KV blocks for tests, tools and benchmarks. The engine's real block
// pool (cache/) replaces it in the server.
#ifndef KVSERVE_BACKENDS_KV_ARENA_H_
#define KVSERVE_BACKENDS_KV_ARENA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/huge_page_memory.h"
#include "model/kv_layout.h"

namespace kvserve::backends {

// Allocates zero-filled blocks of layout.block_bytes() (64-byte aligned) and hands out,
// per sequence, a span of block pointers that stays valid for the arena's lifetime. A
// sequence of 2 MiB or more gets its blocks in one huge-page region, as the engine's
// block pool does (common/huge_page_memory.h), so benchmarks see the same TLB behaviour.
// With `populate`, those regions are made resident when allocated, as kvserve's pool is
// at start (--kv_prefault, its default); without, each 2 MiB page is zeroed by the kernel
// when a step first writes it. Benchmarks populate, so that the first timed repeat of a
// decode does not also fault in a block every block_tokens steps (seen as
// clear_page_erms under the K/V writes in `perf record` of `kvserve-bench backend`, batch 16).
// Threading: not thread-safe; use from one thread.
class KvArena {
 public:
  explicit KvArena(const model::KvLayout& layout, bool populate = false)
      : layout_(layout), populate_(populate) {}
  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  // Blocks for a sequence of up to `capacity_tokens` positions:
  // ceil(capacity_tokens / block_tokens) blocks; none when capacity_tokens <= 0 or the
  // layout has block_tokens <= 0 (a layout ValidateKvLayout rejects). Never fails.
  std::span<uint8_t* const> Allocate(int64_t capacity_tokens);

  const model::KvLayout& layout() const { return layout_; }
  // Blocks handed out so far.
  int64_t block_count() const { return block_count_; }

 private:
  model::KvLayout layout_;
  bool populate_;
  int64_t block_count_ = 0;
  std::vector<std::vector<uint8_t>>
      storage_;  // small sequences: one per block, over-allocated to align
  std::vector<common::HugePageMemory> regions_;  // large sequences: one per sequence
  std::vector<std::unique_ptr<std::vector<uint8_t*>>> sequences_;  // stable spans
};

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_KV_ARENA_H_
