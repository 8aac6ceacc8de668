// Per-sequence block tables over the block pool: longest cached prefix lookup,
// allocation as a sequence grows, registration of full blocks, release, pins.
#ifndef KVSERVE_CACHE_KV_CACHE_MANAGER_H_
#define KVSERVE_CACHE_KV_CACHE_MANAGER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "model/kv_layout.h"

namespace kvserve::cache {

// Caller-chosen id of a sequence (the engine uses its request id).
using SequenceId = uint64_t;

struct KvCacheStats {
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;           // ref_count > 0
  int64_t blocks_cached = 0;         // ref_count 0, findable by key
  int64_t blocks_free = 0;           // ref_count 0, not registered
  int64_t prefix_queries_total = 0;  // full blocks looked up by Open()
  int64_t prefix_hits_total = 0;     // of those, found cached
  int64_t evictions_total = 0;       // cached blocks reused for new data
};

// The KV cache manager decides which blocks a sequence uses; the scheduler decides who
// runs. Running out of blocks is a return value (false), never an error: the caller
// preempts someone and retries.
//
// A sequence's table lists, in position order, the blocks holding positions
// [0, capacity). Its first committed_blocks() blocks are full, written and registered
// in the prefix index under the chained key of its tokens (root = model fingerprint +
// cache salt), so later sequences with the same prefix find them.
//
// Pins: a holder outside any sequence (a session) may keep references on blocks with
// Pin()/PinCommitted() and drop them with Unpin(); pinned blocks are never evicted.
//
// Threading: not thread-safe; owned by the engine's step thread.
class KvCacheManager {
 public:
  struct Options {
    // Block layout (block_tokens defaults to 16 in model::KvLayout). Required.
    model::KvLayout layout;
    // Bytes of KV memory. Default 256 MiB.
    size_t budget_bytes = size_t{256} << 20;
    // Model::fingerprint(): part of every block key, so models never share KV.
    uint64_t model_fingerprint = 0;
  };

  // Errors as BlockPool::Create.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const Options& options);

  int32_t block_tokens() const { return pool_->layout().block_tokens; }
  const model::KvLayout& layout() const { return pool_->layout(); }
  // Capacity of the whole pool in token positions.
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(pool_->num_blocks()) * block_tokens();
  }
  // Blocks needed to hold `num_tokens` positions.
  int32_t BlocksFor(int64_t num_tokens) const;

  // The chain root for requests with `cache_salt`.
  BlockHash RootHash(std::string_view cache_salt) const;

  // Opens the table of a new sequence whose tokens start with `tokens`, and fills it
  // with the longest run of cached full blocks matching tokens[0, max_cached_tokens)
  // (taking a reference on each). Returns the number of positions found (a multiple of
  // block_tokens). The lookup counts in stats() (full blocks queried, blocks found)
  // when `record_stats`; a caller that may retry can record it later instead, once, with
  // RecordPrefixLookup. Precondition: `seq` is not open.
  int32_t Open(SequenceId seq, const BlockHash& root, std::span<const int32_t> tokens,
               int32_t max_cached_tokens, bool record_stats = true);
  void RecordPrefixLookup(int64_t queried_blocks, int64_t hit_blocks) {
    prefix_queries_total_ += queried_blocks;
    prefix_hits_total_ += hit_blocks;
  }

  // Grows the table of open `seq` to cover `num_tokens` positions. Returns false, and
  // allocates nothing, when the pool cannot supply the blocks.
  bool Reserve(SequenceId seq, int32_t num_tokens);

  // Blocks that Reserve(seq, num_tokens) would have to allocate.
  int32_t BlocksToReserve(SequenceId seq, int32_t num_tokens) const;

  // Registers the blocks of `seq` that became full: those inside its first
  // `num_computed` positions. `tokens` are the sequence's tokens (at least num_computed).
  void Commit(SequenceId seq, std::span<const int32_t> tokens, int32_t num_computed);

  // Block pointers of `seq`, in position order, for backends::SequenceInput::blocks.
  // Valid until the next Reserve/Close of `seq`.
  std::span<uint8_t* const> BlockPointers(SequenceId seq) const;
  int32_t committed_blocks(SequenceId seq) const;

  // Releases every block of `seq` (tail first: full blocks stay cached) and forgets it.
  // Unknown ids are ignored.
  void Close(SequenceId seq);

  // Takes a reference on the registered copy of each committed block of `seq` (a block
  // whose key another block registered first is represented by that block) and returns
  // them, in chain order, for a later Unpin. Stops at the first key no longer cached.
  // `tokens` are the sequence's tokens.
  std::vector<BlockId> PinCommitted(SequenceId seq, std::span<const int32_t> tokens);
  void Pin(std::span<const BlockId> blocks);
  void Unpin(std::span<const BlockId> blocks);

  int32_t num_available_blocks() const { return pool_->num_available(); }
  KvCacheStats stats() const;
  const BlockPool& pool() const { return *pool_; }

 private:
  struct Table {
    BlockHash root;
    std::vector<BlockId> blocks;
    std::vector<uint8_t*> pointers;  // parallel to blocks
    std::vector<BlockHash> hashes;   // keys of the committed prefix of `blocks`
  };

  KvCacheManager(const Options& options, std::unique_ptr<BlockPool> pool);
  Table& table(SequenceId seq);
  const Table& table(SequenceId seq) const;

  uint64_t model_fingerprint_;
  std::unique_ptr<BlockPool> pool_;
  absl::flat_hash_map<SequenceId, Table> tables_;
  int64_t prefix_queries_total_ = 0;
  int64_t prefix_hits_total_ = 0;
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_KV_CACHE_MANAGER_H_
