// Metadata of the blocks the session cache stores (no payloads) and the eviction decision:
// which blocks to drop when a new block needs room.
#ifndef KVSERVE_CACHESVC_BLOCK_INDEX_H_
#define KVSERVE_CACHESVC_BLOCK_INDEX_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/block_hash.h"
#include "cachesvc/block_store.h"  // BlockKey

namespace kvserve::cachesvc {

using cache::BlockHash;

enum class Policy {
  // Chain- and conversation-aware (the default): only leaves (blocks with no child present)
  // are evicted, so a chain shrinks tail first and a shared prefix outlives every
  // continuation; among leaves, blocks only reachable from expired sessions go first, blocks
  // of live sessions last; in between, a chain tail that was used once and never extended
  // (the speculative end of a request, e.g. its partial last block) goes before any other
  // idle block, and otherwise a block's priority is its recency plus credits, each earned
  // only where this traffic shows it predicts reuse (see BlockIndexOptions::
  // reuse_credit_ticks): for the number of different continuations confirmed under it (a
  // prefix many conversations share), and for its use class when evicted blocks of that
  // class were seen to come back more often than the average evicted block. When the caller
  // reports whole requests (EndRequest), a conversation-level credit is added: requests are
  // classed by turn number and by how many blocks the turn added, the index learns online
  // how often each class gets another turn, and a request's blocks are kept longer or
  // shorter by how likely its class is to continue (see
  // BlockIndexOptions::conversation_credit_ticks).
  kConversation,
  // Plain LRU over blocks (the baseline): the least recently used block goes first, whatever
  // its children or sessions. A lookup still only reports an unbroken prefix.
  kLru,
};

// "conversation" / "lru"; nullopt for anything else.
std::optional<Policy> PolicyFromName(std::string_view name);
std::string_view PolicyName(Policy policy);

struct BlockIndexOptions {
  // Sum of the bytes of all stored blocks never exceeds this after an Insert. Required (> 0).
  uint64_t capacity_bytes = 0;
  // Per partition: the sum of the bytes of one partition's blocks never exceeds this after
  // an Insert into it. 0 (the default) = no per-partition quota.
  uint64_t partition_quota_bytes = 0;
  Policy policy = Policy::kConversation;
  // kConversation only: the unit of two credits, in ticks of recency (a tick = one block
  // inserted or touched). (1) A block under which n > 1 different continuations were
  // confirmed (a child used twice or extended) gets log2(n) units. (2) Blocks are classed by
  // use count (1, 2-3, 4-7, 8-15, 16+); per class the index counts evicted blocks and how
  // many of them were inserted again while remembered (history_blocks), and a block gets
  // log2(its class's return rate / the overall return rate) units (smoothed towards the
  // overall rate; 0 until some evicted block came back). Neither credit assumes that use
  // predicts reuse: on traffic where it does not (e.g. conversations whose turn count is
  // memoryless), both stay near 0. Default 12,000 (the magnitude measured best on
  // Mooncake's conversation trace; the synthetic traces of bench/cache_policy_traces.sh are
  // insensitive to it, see docs/performance.md). 0 = pure recency among leaves.
  int64_t reuse_credit_ticks = 12'000;
  // kConversation only: how many evicted blocks' use and branch counts are remembered
  // (oldest forgotten first), so a block that comes back resumes its counts instead of
  // starting over as a one-time block, and its return is counted for its use class. About
  // 64 bytes each. Default 262,144; 0 = none (and no use-class credit).
  int64_t history_blocks = 262'144;
  // kConversation only, used when the caller reports requests with EndRequest: a request's
  // blocks get log2(P(class continues) / P(any request continues)) times this many ticks of
  // extra recency, where the class is (turn number 1, 2, 3, 4-5, 6-9, 10+; log-spaced so
  // that heavy-tailed turn counts can show) x (blocks the turn added: <2, <4, <8, <16, more)
  // and the probabilities are counted online (smoothed towards the overall rate). Default
  // 6,000 (the magnitude measured best on Mooncake's conversation trace, see
  // docs/performance.md); 0 = off.
  int64_t conversation_credit_ticks = 6'000;
};

enum class EvictReason {
  kExpiredSession = 0,  // only reachable from sessions whose expiry passed
  kIdle = 1,            // capacity pressure, no live session holds it
  kLiveSession = 2,     // capacity pressure, although a live session holds it
  kQuota = 3,           // its partition's quota
};
inline constexpr int kNumEvictReasons = 4;
std::string_view EvictReasonName(EvictReason reason);

struct Evicted {
  BlockHash partition;
  BlockHash key;
  uint64_t bytes = 0;
  EvictReason reason = EvictReason::kIdle;
};

enum class InsertOutcome {
  kInserted,  // stored
  kTouched,   // the key was present: only counted as a use
  // Not stored: room could not be made without evicting the block's own ancestors (its
  // chain alone fills the capacity or the quota). Blocks evicted while trying are listed.
  kNoRoom,
};

struct InsertResult {
  InsertOutcome outcome = InsertOutcome::kInserted;
  std::vector<Evicted> evicted;  // the caller deletes their payloads
};

struct BlockIndexStats {
  int64_t blocks = 0;
  uint64_t bytes = 0;
  int64_t partitions = 0;     // partitions with at least one block
  int64_t live_sessions = 0;  // sessions whose expiry has not passed
  int64_t expired_sessions = 0;
  int64_t inserts_total = 0;  // new blocks (re-inserts not counted)
  int64_t evictions_total[kNumEvictReasons] = {};
  int64_t erased_total = 0;
  int64_t history_blocks = 0;            // evicted blocks whose use count is remembered
  int64_t history_hits_total = 0;        // inserts that resumed a remembered use count
  int64_t requests_total = 0;            // EndRequest calls
  int64_t conversation_turns_total = 0;  // of those, continuations of an earlier request
};

// The index of stored blocks. A block is identified by (partition, key): `partition` names
// the tenant / model identity (the cache salt) and owns a quota; blocks of different
// partitions are separate entries even when their keys are equal (the key already chains
// from a root that includes the salt, but the index does not rely on it). A block's parent
// is the previous block of its chain in the same partition (none for the first block).
//
// Lookups are prefix based: LongestPrefix(chain) reports the longest run chain[0..k) that is
// present, so a chain with a missing block reads as its prefix up to that block, never as
// whole. Under kConversation eviction keeps every stored chain unbroken (only leaves go);
// only Erase can cut a chain in the middle (the blocks below the cut stay, unreachable by
// lookups until the erased block is inserted again, and are evicted as usual).
//
// Sessions: a session (any caller id) names the head (last) block of its conversation and an
// expiry time. Until then its chain (the head and its ancestors) is evicted only after every
// block no live session holds; after it, blocks no live session reaches go first. Under
// pressure even a live session's chain is evicted, tail first. Sessions do not change kLru.
// Expiry is checked against the `now` of each call; time never moves backwards for the
// index (a smaller `now` than seen before is treated as the latest one).
//
// Invariants (kConversation): a block with a child present is never an eviction candidate;
// every present block whose parent is absent was cut off by Erase (or its parent was never
// stored, which Insert refuses); bytes() <= capacity_bytes after every Insert.
//
// Cost: LongestPrefix O(k log n) for k blocks found; Insert, Erase and each eviction
// O(log n) amortized (ordered sets keyed by eviction priority, no scans); SetSession and
// RemoveSession O(log n) plus the sessions sharing the same block; EndRequest O(k log n) for a
// chain of k blocks.
//
// Threading: not thread-safe; the caller serializes every call.
class BlockIndex {
 public:
  // INVALID_ARGUMENT for capacity_bytes == 0 or a negative reuse_credit_ticks.
  static absl::StatusOr<std::unique_ptr<BlockIndex>> Create(const BlockIndexOptions& options);

  // Length k of the longest run chain[0..k) of `partition` present (0..chain.size()).
  // When `touch`, each of those k blocks counts as used now. `bytes_out` (optional) gets
  // the sum of their bytes.
  int32_t LongestPrefix(const BlockHash& partition, std::span<const BlockHash> chain,
                        absl::Time now, bool touch, uint64_t* bytes_out = nullptr);

  bool Contains(const BlockHash& partition, const BlockHash& key) const;

  // Reports that one request with this chain (its blocks in order) was served: called after
  // its lookup and the Inserts of its blocks. The index detects conversation turns online: a
  // request is a turn of an earlier one when its chain starts with that request's whole
  // chain except (at most) its last block (usually partial, so the next turn does not share
  // it) and is longer. Under kConversation it then sets the conversation credit of the
  // chain's present blocks (see BlockIndexOptions::conversation_credit_ticks). Remembers
  // the last 65,536 requests' chain ends (about 100 bytes each). Chains under 2 blocks are
  // only counted.
  void EndRequest(const BlockHash& partition, std::span<const BlockHash> chain, absl::Time now);

  // Stores block `key` of `partition` (`bytes` of payload) whose parent is `parent`
  // (nullopt for the first block of a chain), as used now, evicting other blocks (never the
  // block's ancestors) until the capacity and the partition's quota hold; see InsertOutcome.
  // A key already present is only touched (its bytes and parent are not changed; nothing is
  // evicted). Errors (nothing changes): INVALID_ARGUMENT for bytes == 0; RESOURCE_EXHAUSTED
  // when the block alone is bigger than the capacity or the quota; FAILED_PRECONDITION when
  // the parent is not present (the block could never be found by a lookup).
  absl::StatusOr<InsertResult> Insert(const BlockHash& partition, const BlockHash& key,
                                      std::optional<BlockHash> parent, uint64_t bytes,
                                      absl::Time now);

  // Forgets one block (e.g. its payload was found corrupt); returns false if absent. Its
  // descendants stay stored but lookups stop before the erased block until it is
  // inserted again. Sessions whose chain went through it keep holding what remains.
  bool Erase(const BlockHash& partition, const BlockHash& key);

  // Creates or replaces session `id`: its conversation's chain ends at block `head` of
  // `partition` and it is live until `expires_at`. If `head` is absent the session holds
  // nothing until it is set again.
  void SetSession(const std::string& id, const BlockHash& partition, const BlockHash& head,
                  absl::Time expires_at, absl::Time now);
  // Forgets session `id` (unknown ids are ignored); its blocks become ordinary idle blocks.
  void RemoveSession(const std::string& id);

  BlockIndexStats stats() const;
  uint64_t bytes() const { return bytes_; }
  const BlockIndexOptions& options() const { return options_; }

  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;
  ~BlockIndex();

 private:
  struct Entry;
  struct Session;
  // The end of a reported request's chain (keyed by its next-to-last block).
  struct ChainEnd {
    int32_t turn = 1;
    int32_t length = 0;  // blocks up to and including the key
    int cls = 0;         // conversation class of the request
    bool continued = false;
    uint64_t serial = 0;
  };
  static constexpr int kTurnClasses = 6;  // turn 1, 2, 3, 4-5, 6-9, 10+
  static constexpr int kDeltaClasses = 5;
  static constexpr int kConversationClasses = kTurnClasses * kDeltaClasses;
  static constexpr size_t kMaxChainEnds = 65'536;
  struct Partition;
  // Position of a leaf in the candidate sets: (tier, priority, serial) ascending = evict
  // first. Tier 0: expired sessions only; 1: idle; 2: held by a live session.
  struct Candidate {
    int tier = 0;
    int64_t priority = 0;
    uint64_t serial = 0;  // unique per entry: ties broken by insertion order
    Entry* entry = nullptr;
    friend bool operator<(const Candidate& a, const Candidate& b) {
      if (a.tier != b.tier) return a.tier < b.tier;
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.serial < b.serial;
    }
  };

  explicit BlockIndex(const BlockIndexOptions& options);

  void AdvanceTime(absl::Time now);
  void Touch(Entry& e);
  // Marks `e` as a real continuation of its parent (used twice or extended), once: the
  // parent's branch count grows.
  void Confirm(Entry& e);
  int32_t ChildCount(const BlockKey& k) const;
  void AddChild(const BlockKey& parent);
  void RemoveChild(const BlockKey& parent);
  // Removes `e` from the candidate structures and puts it back where its current state
  // says (not at all when it has children or is pinned by an ongoing Insert).
  void Reposition(Entry& e);
  void Unlist(Entry& e);
  // Evicts the first candidate of `partition` (nullptr: of the whole index); false if none.
  bool EvictOne(Partition* partition, EvictReason forced_reason, std::vector<Evicted>& out);
  // Removes `e` from every structure (moving its session marks to its parent).
  void Remove(Entry& e);
  int TierOf(const Entry& e) const;
  void MarkSession(Session& s);
  void UnmarkSession(Session& s);

  BlockIndexOptions options_;
  // What is remembered of an evicted block.
  struct Remembered {
    uint64_t uses = 0;
    uint64_t branches = 0;
    bool confirmed = false;
    uint64_t serial = 0;
  };
  void Remember(const Entry& e);
  static constexpr int kUseClasses = 5;
  static int UseClass(uint64_t uses);
  // reuse_credit_ticks x log2(how much likelier than an average evicted block an evicted
  // block of this use class was to be inserted again).
  int64_t UseCredit(uint64_t uses) const;
  // (hits / trials) / (all_hits / all_trials), both smoothed.
  static double SmoothedRate(int64_t hits, int64_t trials, int64_t all_hits, int64_t all_trials);
  // What is remembered of `id` (zeros if nothing); forgets it.
  Remembered Recall(const BlockKey& id);

  absl::node_hash_map<BlockKey, Entry> entries_;
  // Use and branch counts of evicted blocks; history_order_ holds (key, serial)
  // oldest first (a stale serial means the key was recalled or remembered again since).
  absl::flat_hash_map<BlockKey, Remembered> history_;
  // Per use class: blocks evicted, and of those, inserted again while remembered.
  int64_t evicted_by_uses_[kUseClasses] = {};
  int64_t returned_by_uses_[kUseClasses] = {};
  int64_t evicted_total_ = 0;
  int64_t returned_total_ = 0;
  std::deque<std::pair<BlockKey, uint64_t>> history_order_;
  // Present children of each key (present or not): (partition, key) -> count > 0.
  absl::flat_hash_map<BlockKey, int32_t> child_counts_;
  // Chain ends of reported requests, and their insertion order (oldest forgotten first; a
  // stale serial means the key was recorded again since).
  absl::flat_hash_map<BlockKey, ChainEnd> chain_ends_;
  std::deque<std::pair<BlockKey, uint64_t>> chain_end_order_;
  // Per conversation class: requests reported and how many of them got another turn.
  int64_t class_requests_[kConversationClasses] = {};
  int64_t class_continued_[kConversationClasses] = {};
  int64_t continued_total_ = 0;
  absl::node_hash_map<BlockHash, Partition> partitions_;
  absl::node_hash_map<std::string, Session> sessions_;
  std::set<std::pair<absl::Time, Session*>> expiries_;  // live sessions by expiry
  std::set<Candidate> candidates_;                      // kConversation
  std::list<Entry*> lru_;                               // kLru: front = least recent
  absl::Time now_ = absl::InfinitePast();
  uint64_t tick_ = 0;
  uint64_t serial_ = 0;
  uint64_t bytes_ = 0;
  BlockIndexStats counters_;
};

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_BLOCK_INDEX_H_
