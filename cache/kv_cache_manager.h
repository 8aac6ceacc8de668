// Per-sequence block tables over the block pool: longest cached prefix lookup,
// allocation as a sequence grows, registration of full blocks, release, and the
// session tier (blocks a conversation keeps between its turns).
#ifndef KVSERVE_CACHE_KV_CACHE_MANAGER_H_
#define KVSERVE_CACHE_KV_CACHE_MANAGER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
  int64_t blocks_used = 0;             // ref_count > 0
  int64_t blocks_cached = 0;           // ref_count 0, findable by key
  int64_t blocks_free = 0;             // ref_count 0, not registered
  int64_t prefix_queries_total = 0;    // full blocks looked up by Open()
  int64_t prefix_hits_total = 0;       // of those, found cached
  int64_t evictions_total = 0;         // cached blocks reused for new data
  int64_t session_blocks = 0;          // references held by the session tier
  int64_t session_reclaims_total = 0;  // sessions whose blocks Reserve() took back
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
// Who owns a block (exactly one answer at any time):
//   * BlockPool owns every block's memory and its free / cached (LRU) state.
//   * A block with references is owned by its holders, and this class holds every
//     reference: the table of each open sequence (Open/Reserve until Close), the
//     session tier (PinSession/ForkSession until ReleaseSession or reclaim), and export
//     holders (PinExport until ReleaseExport), and imports (ReserveImport until
//     FinishImport). The pool's
//     refcount is the number of those holders; at 0 the block goes back to the pool,
//     cached (evictable, findable by key) when it is full and registered, else free.
//   * Nobody outside this class takes or drops references.
//
// Local attention (Options::sliding_window_tokens = W > 0): a token at position p reads
// only positions [p - W + 1, p], so once a sequence has computed n positions no later
// token reads a block that ends at or before n - W + 1. Commit gives such blocks back to
// the pool at once (registered, so still findable until evicted) and leaves a hole in
// the table: a sequence holds O(W) blocks however long it grows, and BlockPointers has
// null entries before the window (backends never read them). Prefix lookup (Open) takes
// the longest cached prefix whose *window* is cached: resuming at position P needs only
// the blocks holding [P - W + 1, P), not their ancestors, so a block is reused exactly
// where the window makes it valid (its KV is keyed by the chain over every earlier token,
// as always). The session tier pins only the window blocks of a turn's end.
//
// The session tier: after a turn, a session keeps references on the committed chain of
// its history (PinSession), so its next turn finds the whole history cached even under
// pressure from other requests. When the pool cannot supply a Reserve, the tier gives
// back whole sessions, least recently pinned first, until it can (or the tier is
// empty); those sessions' next turns recompute whatever got evicted meanwhile.
//
// Threading: not thread-safe; owned by the engine's step thread (except RootHash,
// ChainHashes, identity(), layout() and block_tokens(), which read only what Create fixed).
class KvCacheManager {
 public:
  struct Options {
    // Block layout (block_tokens defaults to 16 in model::KvLayout). Required.
    model::KvLayout layout;
    // Bytes of KV memory. Default 256 MiB.
    size_t budget_bytes = size_t{256} << 20;
    // BlockPool::Options::populate. Default false.
    bool populate = false;
    // Model::fingerprint(): part of every block key (with the layout), so models never
    // share KV.
    uint64_t model_fingerprint = 0;
    // The model's KV heads (part of the identity, see cache::KvIdentity).
    int32_t kv_heads = 0;
    // The model's local-attention window in positions (ModelConfig::sliding_window);
    // 0 = full attention (every block of a running sequence stays held). Default 0.
    int32_t sliding_window_tokens = 0;
  };

  // Errors as BlockPool::Create.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const Options& options);

  int32_t block_tokens() const { return pool_->layout().block_tokens; }
  const model::KvLayout& layout() const { return pool_->layout(); }
  // Capacity of the whole pool in token positions.
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(pool_->num_blocks()) * block_tokens();
  }
  // Positions one sequence can reach with the whole pool to itself, growing by at most
  // `max_step_tokens` positions a step: capacity_tokens() with full attention; with a
  // sliding window W, unbounded (INT64_MAX) when the pool holds the blocks of W - 1 +
  // max_step_tokens positions plus two partial ones (what a sequence holds at most after
  // a Reserve: its window and the step's new positions), else capacity_tokens().
  int64_t SequenceCapacityTokens(int32_t max_step_tokens) const;
  // Blocks needed to hold `num_tokens` positions.
  int32_t BlocksFor(int64_t num_tokens) const;

  // The chain root for requests with `cache_salt` (RootBlockHash of identity()). Reads
  // only what Create fixed: safe from any thread.
  BlockHash RootHash(std::string_view cache_salt) const;
  const KvIdentity& identity() const { return identity_; }

  // Opens the table of a new sequence whose tokens start with `tokens`, and fills it
  // with the longest run of cached full blocks matching tokens[0, max_cached_tokens)
  // (taking a reference on each). With a sliding window the run need only cover the
  // window of the position after it: the largest k such that the blocks of positions
  // [FirstVisible(k * block_tokens), k * block_tokens) are cached; the table's blocks
  // before that are holes. Returns k * block_tokens, the positions that need no
  // recomputation. The lookup counts in stats() (full blocks queried, k)
  // when `record_stats`; a caller that may retry can record it later instead, once, with
  // RecordPrefixLookup. Precondition: `seq` is not open.
  int32_t Open(SequenceId seq, const BlockHash& root, std::span<const int32_t> tokens,
               int32_t max_cached_tokens, bool record_stats = true);
  void RecordPrefixLookup(int64_t queried_blocks, int64_t hit_blocks) {
    prefix_queries_total_ += queried_blocks;
    prefix_hits_total_ += hit_blocks;
  }

  // Grows the table of open `seq` to cover `num_tokens` positions, reclaiming session
  // blocks (least recently pinned session first) when the pool is short and
  // `reclaim_sessions` (false: only free or evictable cached blocks, for speculative
  // positions that are not worth a session's KV). Returns false, and allocates nothing,
  // when the pool cannot supply the blocks even then.
  bool Reserve(SequenceId seq, int32_t num_tokens, bool reclaim_sessions = true);

  // Blocks that Reserve(seq, num_tokens) would have to allocate.
  int32_t BlocksToReserve(SequenceId seq, int32_t num_tokens) const;

  // Registers the blocks of `seq` that became full: those inside its first
  // `num_computed` positions. `tokens` are the sequence's tokens (at least num_computed).
  // With a sliding window, then releases the blocks that no position >= num_computed
  // can read (those ending at or before FirstVisible(num_computed)).
  void Commit(SequenceId seq, std::span<const int32_t> tokens, int32_t num_computed);

  // Block pointers of `seq`, in position order, for backends::SequenceInput::blocks
  // (null for the holes before a sliding window). Valid until the next Reserve/Close
  // of `seq`.
  std::span<uint8_t* const> BlockPointers(SequenceId seq) const;
  int32_t committed_blocks(SequenceId seq) const;

  // Releases every block of `seq` (tail first: full blocks stay cached) and forgets it.
  // Unknown ids are ignored.
  void Close(SequenceId seq);

  // Session tier. `session` is any caller key (the engine uses the session id).
  //
  // Makes `session` hold the committed chain of open sequence `seq` (whose tokens are
  // `tokens`): the registered copy of each committed block (a block whose key another
  // block registered first is represented by that one), in chain order, up to the first
  // key no longer cached. With a sliding window, only the chain's blocks from the window
  // of the position after it (what resuming there reads). Replaces what the session held (the new
  // chain is referenced first, so a shared prefix never passes through the LRU) and makes it the
  // most recently pinned session.
  void PinSession(const std::string& session, SequenceId seq, std::span<const int32_t> tokens);
  // Makes `child` hold what `parent` holds now (nothing if the parent holds nothing),
  // replacing what the child held; the child becomes the most recently pinned.
  void ForkSession(const std::string& parent, const std::string& child);
  // Drops every reference `session` holds. Unknown sessions are ignored.
  void ReleaseSession(const std::string& session);
  // Drops every session's references (shutdown).
  void ReleaseAllSessions();
  // Blocks `session` holds (0 if unknown).
  int32_t session_blocks(const std::string& session) const;

  // Import and export (the session cache service, engine/remote_tier.h).
  //
  // The keys of the first `num_blocks` full blocks of `tokens` under `root`, in chain
  // order. Precondition: tokens.size() >= num_blocks * block_tokens(). Reads only what
  // Create fixed: safe from any thread (like RootHash).
  std::vector<BlockHash> ChainHashes(const BlockHash& root, std::span<const int32_t> tokens,
                                     int32_t num_blocks) const;
  // How many leading blocks of `chain` (keys from ChainHashes(root, tokens, ...)) are
  // cached here now. Takes no references and changes nothing.
  int32_t CachedPrefixBlocks(const BlockHash& root, std::span<const int32_t> tokens,
                             std::span<const BlockHash> chain) const;
  // Imports block payloads computed elsewhere, in two steps, so that another thread
  // writes them straight into pool memory while the step thread goes on:
  //
  // ReserveImport holds, under `key`, blocks [0, first) of `chain` (keys from
  // ChainHashes(root, tokens, ...); they must be cached: else it holds nothing and
  // returns nothing) and up to `count` new blocks for chain[first, first + count): from
  // free or evictable cached blocks only (never sessions'; a sequence that recomputes
  // those positions would evict the same LRU blocks), fewer when the pool is short.
  // Returns the new blocks' memory in chain order (layout().block_bytes() bytes each):
  // any one thread may write it until it hands the result back to the step thread,
  // which calls FinishImport. The held prefix cannot be evicted meanwhile.
  // Precondition: `key` holds no import.
  std::vector<uint8_t*> ReserveImport(uint64_t key, const BlockHash& root,
                                      std::span<const int32_t> tokens,
                                      std::span<const BlockHash> chain, int32_t first,
                                      int32_t count);
  // Ends the import under `key`: its first `written` new blocks (which now hold blocks
  // first .. first + written - 1 of `tokens` under the reserved chain, checked by the
  // caller) are registered, as if a sequence had computed and closed them (cached,
  // unreferenced, most recently used); a key cached meanwhile by someone else keeps its
  // block and ours goes back free, as do the blocks not written. Returns the blocks
  // [0, k) of the chain cached afterwards (k <= first + written); 0 for an unknown key.
  // `tokens` may be empty when written == 0.
  int32_t FinishImport(uint64_t key, std::span<const int32_t> tokens, int32_t written);
  // Blocks held by imports not finished yet (prefixes and new blocks).
  int64_t import_blocks() const { return import_blocks_; }
  // Of those, the new blocks reserved for payloads (without the held prefixes).
  int64_t import_new_blocks() const { return import_new_blocks_; }
  // A block held for export: its memory stays valid and unchanged until ReleaseExport.
  struct ExportBlock {
    BlockHash parent;  // the root for the first block
    BlockHash hash;
    const uint8_t* data = nullptr;
  };
  // References the committed chain of open sequence `seq` (whose tokens are `tokens`)
  // under `key` so that another thread can read it (the export holder, unlike a session,
  // is never reclaimed). Returns the blocks in chain order (up to the first committed
  // block no longer registered). Precondition: `key` holds nothing.
  std::vector<ExportBlock> PinExport(uint64_t key, SequenceId seq, std::span<const int32_t> tokens);
  // Drops what `key` holds. Unknown keys are ignored.
  void ReleaseExport(uint64_t key);
  int64_t export_blocks() const { return export_blocks_; }

  int32_t num_available_blocks() const { return pool_->num_available(); }
  KvCacheStats stats() const;
  const BlockPool& pool() const { return *pool_; }

 private:
  // Invariants: blocks[0, first_held) are holes (kNoBlock, pointer null), given back
  // because no future position of the sequence reads them; blocks[first_held, end) are
  // referenced by this table. Holes exist only with a sliding window, and only among
  // committed blocks (first_held <= hashes.size()).
  struct Table {
    BlockHash root;
    std::vector<BlockId> blocks;
    std::vector<uint8_t*> pointers;  // parallel to blocks
    std::vector<BlockHash> hashes;   // keys of the committed prefix of `blocks`
    size_t first_held = 0;
  };
  static constexpr BlockId kNoBlock = -1;

  // The block of the first position a token at `pos` reads (0 without a window).
  size_t WindowStartBlock(int64_t pos) const;

  struct SessionBlocks {
    std::vector<BlockId> blocks;  // chain order
    int64_t last_pinned = 0;      // session_clock_ at the last PinSession/ForkSession
  };

  KvCacheManager(const Options& options, std::unique_ptr<BlockPool> pool);
  Table& table(SequenceId seq);
  const Table& table(SequenceId seq) const;
  // References the registered copies of `seq`'s committed blocks [first, committed) (see
  // PinSession), up to the first one no longer cached.
  std::vector<BlockId> RefCommitted(SequenceId seq, std::span<const int32_t> tokens, size_t first);
  // Replaces what `session` holds with `blocks` (already referenced).
  void SetSessionBlocks(const std::string& session, std::vector<BlockId> blocks);
  // Releases the blocks of the least recently pinned session that holds any; false
  // when no session holds blocks.
  bool ReclaimOneSession();

  const KvIdentity identity_;
  const int32_t window_tokens_;  // Options::sliding_window_tokens
  std::unique_ptr<BlockPool> pool_;
  absl::flat_hash_map<SequenceId, Table> tables_;
  absl::flat_hash_map<std::string, SessionBlocks> sessions_;
  absl::flat_hash_map<uint64_t, std::vector<BlockId>> exports_;
  int64_t export_blocks_ = 0;
  // An import between ReserveImport and FinishImport.
  struct Import {
    BlockHash root;
    int32_t first = 0;             // blocks[0, first) are the held cached prefix
    std::vector<BlockId> blocks;   // the prefix, then the new blocks, chain order
    std::vector<BlockHash> chain;  // their keys
  };
  absl::flat_hash_map<uint64_t, Import> imports_;
  int64_t import_blocks_ = 0;
  int64_t import_new_blocks_ = 0;
  int64_t session_clock_ = 0;  // orders sessions by their last pin
  int64_t session_blocks_ = 0;
  int64_t session_reclaims_total_ = 0;
  int64_t prefix_queries_total_ = 0;
  int64_t prefix_hits_total_ = 0;
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_KV_CACHE_MANAGER_H_
