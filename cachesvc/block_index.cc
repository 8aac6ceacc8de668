#include "cachesvc/block_index.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {

std::optional<Policy> PolicyFromName(std::string_view name) {
  if (name == "conversation") return Policy::kConversation;
  if (name == "lru") return Policy::kLru;
  return std::nullopt;
}

std::string_view PolicyName(Policy policy) {
  return policy == Policy::kLru ? "lru" : "conversation";
}

std::string_view EvictReasonName(EvictReason reason) {
  switch (reason) {
    case EvictReason::kExpiredSession:
      return "expired_session";
    case EvictReason::kIdle:
      return "idle";
    case EvictReason::kLiveSession:
      return "live_session";
    case EvictReason::kQuota:
      return "quota";
  }
  return "unknown";
}

struct BlockIndex::Session {
  std::string id;
  BlockHash partition;
  BlockHash head;
  absl::Time expires_at;
  bool expired = false;
  // The deepest present block of the session's chain that carries its mark (the head,
  // or the ancestor the mark moved to when the blocks below it were evicted); nullptr
  // when the session holds nothing.
  Entry* marked = nullptr;
};

struct BlockIndex::Partition {
  uint64_t bytes = 0;
  int64_t blocks = 0;
  std::set<Candidate> candidates;  // kConversation: this partition's leaves
  std::list<Entry*> lru;           // kLru: front = least recently used
};

struct BlockIndex::Entry {
  BlockKey id;
  std::optional<BlockHash> parent;
  uint64_t bytes = 0;
  uint64_t last_tick = 0;
  uint64_t uses = 0;
  // Distinct children confirmed (used twice or extended) under it, ever: how many
  // different continuations share this prefix.
  uint64_t branches = 0;
  bool confirmed = false;  // counted in its parent's branches
  bool had_child = false;
  int64_t conversation_credit = 0;  // ticks, from the class of the last request it was in
  uint64_t serial = 0;
  Partition* partition = nullptr;
  int pins = 0;  // > 0 while an Insert of a child needs it to stay
  // kConversation: where it is listed in candidates_ / partition->candidates, if it is.
  bool listed = false;
  Candidate candidate;
  // kLru: its positions in lru_ and partition->lru.
  std::list<Entry*>::iterator lru_it;
  std::list<Entry*>::iterator partition_lru_it;
  std::vector<Session*> sessions;  // sessions whose mark is on this block
};

BlockIndex::BlockIndex(const BlockIndexOptions& options) : options_(options) {}
BlockIndex::~BlockIndex() = default;

absl::StatusOr<std::unique_ptr<BlockIndex>> BlockIndex::Create(const BlockIndexOptions& options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("BlockIndex: capacity_bytes must be > 0");
  }
  if (options.history_blocks < 0) {
    return absl::InvalidArgumentError("BlockIndex: history_blocks must be >= 0");
  }
  if (options.reuse_credit_ticks < 0) {
    return absl::InvalidArgumentError("BlockIndex: reuse_credit_ticks must be >= 0");
  }
  if (options.conversation_credit_ticks < 0) {
    return absl::InvalidArgumentError("BlockIndex: conversation_credit_ticks must be >= 0");
  }
  return std::unique_ptr<BlockIndex>(new BlockIndex(options));
}

void BlockIndex::AdvanceTime(absl::Time now) {
  now_ = std::max(now_, now);
  while (!expiries_.empty() && expiries_.begin()->first <= now_) {
    Session* s = expiries_.begin()->second;
    expiries_.erase(expiries_.begin());
    s->expired = true;
    if (s->marked != nullptr) Reposition(*s->marked);
  }
}

int32_t BlockIndex::ChildCount(const BlockKey& k) const {
  auto it = child_counts_.find(k);
  return it == child_counts_.end() ? 0 : it->second;
}

void BlockIndex::AddChild(const BlockKey& parent) { ++child_counts_[parent]; }

void BlockIndex::RemoveChild(const BlockKey& parent) {
  auto it = child_counts_.find(parent);
  if (it == child_counts_.end()) return;
  if (--it->second == 0) child_counts_.erase(it);
}

int BlockIndex::TierOf(const Entry& e) const {
  if (e.sessions.empty()) return 1;
  for (const Session* s : e.sessions) {
    if (!s->expired) return 2;
  }
  return 0;
}

void BlockIndex::Unlist(Entry& e) {
  if (!e.listed) return;
  candidates_.erase(e.candidate);
  e.partition->candidates.erase(e.candidate);
  e.listed = false;
}

void BlockIndex::Reposition(Entry& e) {
  if (options_.policy == Policy::kLru) return;  // LRU order changes only on Touch
  Unlist(e);
  if (e.pins > 0 || ChildCount(e.id) > 0) return;
  int64_t priority = static_cast<int64_t>(e.last_tick);
  if (!e.had_child && e.uses <= 1) {
    // A tail used once and never extended: the speculative end of a request (in chat
    // traffic mostly its partial last block, which the next turn does not share).
    priority -= int64_t{1} << 52;
  } else {
    if (e.branches > 1) {
      priority += static_cast<int64_t>(static_cast<double>(options_.reuse_credit_ticks) *
                                       std::log2(static_cast<double>(e.branches)));
    }
    priority += UseCredit(e.uses);
    priority += e.conversation_credit;
  }
  e.candidate = Candidate{TierOf(e), priority, e.serial, &e};
  candidates_.insert(e.candidate);
  e.partition->candidates.insert(e.candidate);
  e.listed = true;
}

int BlockIndex::UseClass(uint64_t uses) {
  int c = 0;
  while (c + 1 < kUseClasses && uses >= (uint64_t{2} << c)) ++c;
  return c;  // 1 use, 2-3, 4-7, 8-15, 16+
}

int64_t BlockIndex::UseCredit(uint64_t uses) const {
  if (options_.reuse_credit_ticks == 0) return 0;
  const int c = UseClass(uses);
  return static_cast<int64_t>(static_cast<double>(options_.reuse_credit_ticks) *
                              std::log2(SmoothedRate(returned_by_uses_[c], evicted_by_uses_[c],
                                                     returned_total_, evicted_total_)));
}

double BlockIndex::SmoothedRate(int64_t hits, int64_t trials, int64_t all_hits,
                                int64_t all_trials) {
  if (all_hits == 0) return 1.0;  // no evidence that any class differs
  // The class's rate is smoothed towards the overall one with the weight of 4 observations,
  // so a class seen rarely gets little credit either way.
  constexpr double kPriorWeight = 4.0;
  const double overall = static_cast<double>(all_hits) / static_cast<double>(all_trials);
  const double rate = (static_cast<double>(hits) + kPriorWeight * overall) /
                      (static_cast<double>(trials) + kPriorWeight);
  return rate / overall;
}

void BlockIndex::Confirm(Entry& e) {
  if (e.confirmed) return;
  e.confirmed = true;
  if (!e.parent.has_value()) return;
  auto it = entries_.find(BlockKey{e.id.partition, *e.parent});
  if (it == entries_.end()) return;
  ++it->second.branches;
  if (it->second.listed) Reposition(it->second);
}

void BlockIndex::Touch(Entry& e) {
  e.last_tick = ++tick_;
  ++e.uses;
  if (e.uses >= 2 && options_.policy != Policy::kLru) Confirm(e);
  if (options_.policy == Policy::kLru) {
    lru_.splice(lru_.end(), lru_, e.lru_it);
    e.partition->lru.splice(e.partition->lru.end(), e.partition->lru, e.partition_lru_it);
  } else {
    Reposition(e);
  }
}

int32_t BlockIndex::LongestPrefix(const BlockHash& partition, std::span<const BlockHash> chain,
                                  absl::Time now, bool touch, uint64_t* bytes_out) {
  AdvanceTime(now);
  int32_t found = 0;
  uint64_t bytes = 0;
  for (const BlockHash& key : chain) {
    auto it = entries_.find(BlockKey{partition, key});
    if (it == entries_.end()) break;
    if (touch) Touch(it->second);
    bytes += it->second.bytes;
    ++found;
  }
  if (bytes_out != nullptr) *bytes_out = bytes;
  return found;
}

void BlockIndex::EndRequest(const BlockHash& partition, std::span<const BlockHash> chain,
                            absl::Time now) {
  AdvanceTime(now);
  ++counters_.requests_total;
  const int32_t n = static_cast<int32_t>(chain.size());
  if (n < 2) return;
  // A turn of an earlier request: the longest earlier chain (minus its last block) that
  // this chain starts with and extends.
  int32_t turn = 1;
  int32_t delta = n - 1;
  for (int32_t k = n - 1; k >= 2; --k) {
    auto it = chain_ends_.find(BlockKey{partition, chain[k - 1]});
    if (it == chain_ends_.end() || it->second.length != k) continue;
    ChainEnd& prev = it->second;
    turn = prev.turn + 1;
    delta = n - 1 - k;
    if (!prev.continued) {
      prev.continued = true;
      ++class_continued_[prev.cls];
      ++continued_total_;
    }
    ++counters_.conversation_turns_total;
    break;
  }
  const int delta_class = delta < 2 ? 0 : delta < 4 ? 1 : delta < 8 ? 2 : delta < 16 ? 3 : 4;
  const int turn_class = turn <= 3 ? turn - 1 : turn <= 5 ? 3 : turn <= 9 ? 4 : 5;
  const int cls = turn_class * kDeltaClasses + delta_class;
  ++class_requests_[cls];
  // Remember where this request's chain ends (its last block is usually partial: a next turn
  // shares everything before it).
  const BlockKey end_key{partition, chain[n - 2]};
  const uint64_t serial = ++serial_;
  chain_ends_[end_key] = ChainEnd{turn, n - 1, cls, false, serial};
  chain_end_order_.emplace_back(end_key, serial);
  while (chain_ends_.size() > kMaxChainEnds) {
    const auto [key, old_serial] = chain_end_order_.front();
    chain_end_order_.pop_front();
    auto it = chain_ends_.find(key);
    if (it != chain_ends_.end() && it->second.serial == old_serial) chain_ends_.erase(it);
  }
  if (chain_end_order_.size() > 2 * chain_ends_.size() + 16) {
    std::deque<std::pair<BlockKey, uint64_t>> live;
    for (const auto& [key, rec_serial] : chain_end_order_) {
      auto it = chain_ends_.find(key);
      if (it != chain_ends_.end() && it->second.serial == rec_serial)
        live.emplace_back(key, rec_serial);
    }
    chain_end_order_.swap(live);
  }
  if (options_.policy == Policy::kLru || options_.conversation_credit_ticks == 0) return;
  // How much likelier than an average request this class is to get another turn (counted
  // so far, smoothed towards the overall rate with a weight of 4 requests).
  constexpr double kPriorWeight = 4.0;
  const double overall = (static_cast<double>(continued_total_) + 1.0) /
                         (static_cast<double>(counters_.requests_total) + kPriorWeight);
  const double rate = (static_cast<double>(class_continued_[cls]) + kPriorWeight * overall) /
                      (static_cast<double>(class_requests_[cls]) + kPriorWeight);
  const int64_t credit = static_cast<int64_t>(
      static_cast<double>(options_.conversation_credit_ticks) * std::log2(rate / overall));
  for (const BlockHash& key : chain) {
    auto it = entries_.find(BlockKey{partition, key});
    if (it == entries_.end()) break;
    Entry& e = it->second;
    if (e.conversation_credit == credit) continue;
    e.conversation_credit = credit;
    if (e.listed) Reposition(e);
  }
}

bool BlockIndex::Contains(const BlockHash& partition, const BlockHash& key) const {
  return entries_.contains(BlockKey{partition, key});
}

void BlockIndex::Remove(Entry& e) {
  Unlist(e);
  if (options_.policy == Policy::kLru) {
    lru_.erase(e.lru_it);
    e.partition->lru.erase(e.partition_lru_it);
  }
  bytes_ -= e.bytes;
  e.partition->bytes -= e.bytes;
  --e.partition->blocks;
  Entry* parent = nullptr;
  if (e.parent.has_value()) {
    const BlockKey parent_key{e.id.partition, *e.parent};
    RemoveChild(parent_key);
    auto it = entries_.find(parent_key);
    if (it != entries_.end()) parent = &it->second;
  }
  for (Session* s : e.sessions) {
    s->marked = parent;
    if (parent != nullptr) parent->sessions.push_back(s);
  }
  if (e.partition->blocks == 0) partitions_.erase(e.id.partition);
  const BlockKey id = e.id;
  entries_.erase(id);  // `e` is gone from here on
  if (parent != nullptr) Reposition(*parent);
}

bool BlockIndex::EvictOne(Partition* partition, EvictReason forced_reason,
                          std::vector<Evicted>& out) {
  Entry* victim = nullptr;
  EvictReason reason = forced_reason;
  if (options_.policy == Policy::kLru) {
    std::list<Entry*>& order = partition != nullptr ? partition->lru : lru_;
    for (Entry* e : order) {
      if (e->pins == 0) {
        victim = e;
        break;
      }
    }
    if (victim == nullptr) return false;
  } else {
    std::set<Candidate>& order = partition != nullptr ? partition->candidates : candidates_;
    if (order.empty()) return false;
    const Candidate& first = *order.begin();
    victim = first.entry;
    if (forced_reason != EvictReason::kQuota) {
      reason = first.tier == 0   ? EvictReason::kExpiredSession
               : first.tier == 1 ? EvictReason::kIdle
                                 : EvictReason::kLiveSession;
    }
  }
  out.push_back(Evicted{victim->id.partition, victim->id.key, victim->bytes, reason});
  Remember(*victim);
  ++counters_.evictions_total[static_cast<int>(reason)];
  Remove(*victim);
  return true;
}

absl::StatusOr<InsertResult> BlockIndex::Insert(const BlockHash& partition, const BlockHash& key,
                                                std::optional<BlockHash> parent, uint64_t bytes,
                                                absl::Time now) {
  if (bytes == 0) return absl::InvalidArgumentError("BlockIndex::Insert: bytes must be > 0");
  AdvanceTime(now);
  const BlockKey id{partition, key};
  InsertResult result;
  if (auto it = entries_.find(id); it != entries_.end()) {
    Touch(it->second);
    result.outcome = InsertOutcome::kTouched;
    return result;
  }
  if (bytes > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("block of ", bytes,
                                                     " bytes exceeds the cache capacity of ",
                                                     options_.capacity_bytes, " bytes"));
  }
  const uint64_t quota = options_.partition_quota_bytes;
  if (quota > 0 && bytes > quota) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "block of ", bytes, " bytes exceeds the partition quota of ", quota, " bytes"));
  }
  Entry* parent_entry = nullptr;
  if (parent.has_value()) {
    auto it = entries_.find(BlockKey{partition, *parent});
    if (it == entries_.end()) {
      return absl::FailedPreconditionError(
          "BlockIndex::Insert: the parent block is not present (insert a chain in order)");
    }
    parent_entry = &it->second;
    ++parent_entry->pins;
    Reposition(*parent_entry);
  }
  // Make room: first the partition's quota, then the whole capacity.
  bool fits = true;
  if (quota > 0) {
    auto pit = partitions_.find(partition);
    while (fits && pit != partitions_.end() && pit->second.bytes + bytes > quota) {
      fits = EvictOne(&pit->second, EvictReason::kQuota, result.evicted);
      pit = partitions_.find(partition);  // the partition goes when its last block does
    }
  }
  while (fits && bytes_ + bytes > options_.capacity_bytes) {
    fits = EvictOne(nullptr, EvictReason::kIdle, result.evicted);
  }
  if (parent_entry != nullptr) --parent_entry->pins;
  if (!fits) {
    if (parent_entry != nullptr) Reposition(*parent_entry);
    result.outcome = InsertOutcome::kNoRoom;
    return result;
  }
  Partition& part = partitions_[partition];
  Entry& e = entries_[id];
  e.id = id;
  e.parent = parent;
  e.bytes = bytes;
  e.serial = ++serial_;
  e.partition = &part;
  const Remembered past = Recall(id);
  e.uses = past.uses;
  e.branches = past.branches;
  e.confirmed = past.confirmed;
  if (options_.policy == Policy::kLru) {
    e.lru_it = lru_.insert(lru_.end(), &e);
    e.partition_lru_it = part.lru.insert(part.lru.end(), &e);
  }
  bytes_ += bytes;
  part.bytes += bytes;
  ++part.blocks;
  ++counters_.inserts_total;
  if (parent_entry != nullptr) {
    AddChild(BlockKey{partition, *parent});
    parent_entry->had_child = true;
    Reposition(*parent_entry);
    if (options_.policy != Policy::kLru) Confirm(*parent_entry);
  }
  Touch(e);
  result.outcome = InsertOutcome::kInserted;
  return result;
}

void BlockIndex::Remember(const Entry& e) {
  if (options_.policy == Policy::kLru || options_.history_blocks == 0) return;
  const uint64_t serial = ++serial_;
  history_[e.id] = Remembered{e.uses, e.branches, e.confirmed, serial};
  ++evicted_by_uses_[UseClass(e.uses)];
  ++evicted_total_;
  history_order_.emplace_back(e.id, serial);
  while (static_cast<int64_t>(history_.size()) > options_.history_blocks) {
    const auto [key, old_serial] = history_order_.front();
    history_order_.pop_front();
    auto it = history_.find(key);
    if (it != history_.end() && it->second.serial == old_serial) history_.erase(it);
  }
  // Recall leaves stale records behind: compact when they are the majority (amortized O(1)).
  if (history_order_.size() > 2 * history_.size() + 16) {
    std::deque<std::pair<BlockKey, uint64_t>> live;
    for (const auto& [key, rec_serial] : history_order_) {
      auto it = history_.find(key);
      if (it != history_.end() && it->second.serial == rec_serial)
        live.emplace_back(key, rec_serial);
    }
    history_order_.swap(live);
  }
}

BlockIndex::Remembered BlockIndex::Recall(const BlockKey& id) {
  auto it = history_.find(id);
  if (it == history_.end()) return Remembered{};
  const Remembered past = it->second;
  history_.erase(it);
  ++returned_by_uses_[UseClass(past.uses)];
  ++returned_total_;
  ++counters_.history_hits_total;
  return past;
}

bool BlockIndex::Erase(const BlockHash& partition, const BlockHash& key) {
  auto it = entries_.find(BlockKey{partition, key});
  if (it == entries_.end()) return false;
  Remove(it->second);
  ++counters_.erased_total;
  return true;
}

void BlockIndex::MarkSession(Session& s) {
  auto it = entries_.find(BlockKey{s.partition, s.head});
  if (it == entries_.end()) return;
  s.marked = &it->second;
  s.marked->sessions.push_back(&s);
  Reposition(*s.marked);
}

void BlockIndex::UnmarkSession(Session& s) {
  if (s.marked == nullptr) return;
  Entry& e = *s.marked;
  e.sessions.erase(std::find(e.sessions.begin(), e.sessions.end(), &s));
  s.marked = nullptr;
  Reposition(e);
}

void BlockIndex::SetSession(const std::string& id, const BlockHash& partition,
                            const BlockHash& head, absl::Time expires_at, absl::Time now) {
  AdvanceTime(now);
  auto [it, created] = sessions_.try_emplace(id);
  Session& s = it->second;
  if (!created) {
    UnmarkSession(s);
    if (!s.expired) expiries_.erase({s.expires_at, &s});
  }
  s.id = id;
  s.partition = partition;
  s.head = head;
  s.expires_at = expires_at;
  s.expired = expires_at <= now_;
  if (!s.expired) expiries_.insert({expires_at, &s});
  MarkSession(s);
}

void BlockIndex::RemoveSession(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  UnmarkSession(s);
  if (!s.expired) expiries_.erase({s.expires_at, &s});
  sessions_.erase(it);
}

BlockIndexStats BlockIndex::stats() const {
  BlockIndexStats st = counters_;
  st.blocks = static_cast<int64_t>(entries_.size());
  st.bytes = bytes_;
  st.partitions = static_cast<int64_t>(partitions_.size());
  st.history_blocks = static_cast<int64_t>(history_.size());
  st.live_sessions = static_cast<int64_t>(expiries_.size());
  st.expired_sessions = static_cast<int64_t>(sessions_.size()) - st.live_sessions;
  return st;
}

}  // namespace kvserve::cachesvc
