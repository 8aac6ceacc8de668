// The paged KV block pool: fixed-size blocks carved out of one byte budget, reference
// counts, a free list, and the prefix index of full blocks with LRU eviction.
#ifndef KVSERVE_CACHE_BLOCK_POOL_H_
#define KVSERVE_CACHE_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cache/block_hash.h"
#include "common/huge_page_memory.h"
#include "model/kv_layout.h"

namespace kvserve::cache {

// Index of a block in its pool, in [0, num_blocks()).
using BlockId = int32_t;

// Every block is in exactly one of three states:
//   used:    ref_count > 0 (a sequence or a session holds it); may be cached or not.
//   cached:  ref_count == 0 and registered in the prefix index; sits in the LRU list and
//            can be found again by its BlockHash until its memory is needed.
//   free:    ref_count == 0 and not registered; sits in the free list.
//
// Invariants:
//   * num_used() + num_cached() + num_free_uncached() == num_blocks().
//   * The prefix index maps each key to at most one block, and a registered block keeps
//     its key, parent key and tokens until it is evicted (reused).
//   * Allocation takes free blocks first, then evicts the least recently released cached
//     block (the LRU head). Release() walks a chain from its tail to its head, so a
//     chain's tail is always older in the LRU than its head. With full attention a
//     block is only referenced together with all of its ancestors (sequences and
//     sessions hold whole prefixes): eviction then removes chains from the tail and
//     never leaves a cached block whose parent is gone. With local attention (a sliding
//     window, see KvCacheManager) a sequence gives back the head of its chain first and
//     holds only its window, so a cached block may outlive its parent; that is correct
//     there because a lookup needs only the blocks of the window it resumes in, and a
//     block's key still chains over every earlier token.
//
// Threading: not thread-safe. The engine's step thread owns the pool.
class BlockPool {
 public:
  struct Options {
    // Layout of one block (block_tokens, dtype, layers, kv_dim). Required.
    model::KvLayout layout;
    // Memory for blocks, in bytes; num_blocks = budget_bytes / layout.block_bytes().
    // Must give at least one block. Default 256 MiB.
    size_t budget_bytes = size_t{256} << 20;
    // Make the whole pool resident at creation (common::HugePageMemory::Allocate's
    // populate), so the resident size is known at start. Default false.
    bool populate = false;
  };

  // INVALID_ARGUMENT when the layout is empty or the budget holds no block;
  // RESOURCE_EXHAUSTED when the memory cannot be allocated.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(const Options& options);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const model::KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t num_used() const { return num_used_; }
  int32_t num_cached() const { return lru_size_; }
  int32_t num_free_uncached() const { return static_cast<int32_t>(free_.size()); }
  // Blocks an Allocate() may hand out right now: free + cached (evictable).
  int32_t num_available() const { return num_free_uncached() + num_cached(); }
  int64_t evictions_total() const { return evictions_total_; }

  // Start of a block's memory (layout().block_bytes() bytes, 64-byte aligned).
  uint8_t* data(BlockId id) const;
  int32_t ref_count(BlockId id) const { return meta_[static_cast<size_t>(id)].ref_count; }
  bool is_cached(BlockId id) const { return meta_[static_cast<size_t>(id)].registered; }

  // Hands out `n` blocks with ref_count 1, evicting cached blocks LRU-first when the
  // free list runs out. All or nothing: returns false and changes nothing when fewer than
  // `n` blocks are available. Appends the ids to `out`.
  bool Allocate(int32_t n, std::vector<BlockId>* out);

  // The registered block whose key is `hash`, whose parent key is `parent` and whose
  // tokens equal `tokens`, or nullopt. Does not change reference counts.
  std::optional<BlockId> Find(const BlockHash& hash, const BlockHash& parent,
                              std::span<const int32_t> tokens) const;

  // Takes one more reference on `id`. A cached block leaves the LRU list (it stays
  // registered).
  void Ref(BlockId id);

  // Drops one reference on each block, walking `blocks` from the back (the chain's tail)
  // to the front. A block reaching zero goes to the LRU tail when registered, else to the
  // free list. Precondition: each ref_count > 0.
  void Release(std::span<const BlockId> blocks);

  // Registers a used block, whose tokens are all written, under `hash`. Returns false
  // (and registers nothing) when another block already holds `hash`: the caller keeps
  // its duplicate as an ordinary, unregistered block. Registering an already registered
  // block is a no-op returning true when the key is its own.
  bool Register(BlockId id, const BlockHash& hash, const BlockHash& parent,
                std::span<const int32_t> tokens);

 private:
  struct Meta {
    int32_t ref_count = 0;
    bool registered = false;
    BlockHash hash;
    BlockHash parent;
    std::vector<int32_t> tokens;  // [block_tokens] when registered
    int32_t lru_prev = -1;        // LRU links while cached
    int32_t lru_next = -1;
  };

  BlockPool(const model::KvLayout& layout, int32_t num_blocks);
  void LruPushBack(BlockId id);
  void LruRemove(BlockId id);
  void Unregister(BlockId id);

  model::KvLayout layout_;
  size_t block_bytes_ = 0;
  common::HugePageMemory memory_;  // num_blocks * block_bytes_, huge pages where possible
  uint8_t* base_ = nullptr;        // start of block 0 (2 MiB aligned)
  std::vector<Meta> meta_;         // [num_blocks]
  std::vector<BlockId> free_;      // stack of free, unregistered blocks
  absl::flat_hash_map<BlockHash, BlockId> index_;
  int32_t lru_head_ = -1;  // least recently released cached block (evicted first)
  int32_t lru_tail_ = -1;
  int32_t lru_size_ = 0;
  int32_t num_used_ = 0;
  int64_t evictions_total_ = 0;
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_BLOCK_POOL_H_
