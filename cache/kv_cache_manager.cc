#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <utility>

namespace kvserve::cache {

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(const Options& options) {
  BlockPool::Options pool_options;
  pool_options.layout = options.layout;
  pool_options.budget_bytes = options.budget_bytes;
  pool_options.populate = options.populate;
  auto pool = BlockPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<KvCacheManager>(new KvCacheManager(options, *std::move(pool)));
}

KvCacheManager::KvCacheManager(const Options& options, std::unique_ptr<BlockPool> pool)
    : identity_{options.model_fingerprint, options.kv_heads, options.layout},
      window_tokens_(std::max(options.sliding_window_tokens, 0)),
      pool_(std::move(pool)) {}

size_t KvCacheManager::WindowStartBlock(int64_t pos) const {
  if (window_tokens_ == 0 || pos < window_tokens_) return 0;
  return static_cast<size_t>((pos - window_tokens_ + 1) / block_tokens());
}

int32_t KvCacheManager::BlocksFor(int64_t num_tokens) const {
  const int64_t bt = block_tokens();
  return static_cast<int32_t>((std::max<int64_t>(num_tokens, 0) + bt - 1) / bt);
}

int64_t KvCacheManager::SequenceCapacityTokens(int32_t max_step_tokens) const {
  if (window_tokens_ > 0 &&
      pool_->num_blocks() >= BlocksFor(int64_t{window_tokens_} - 1 + max_step_tokens) + 2) {
    return std::numeric_limits<int64_t>::max();
  }
  return capacity_tokens();
}

BlockHash KvCacheManager::RootHash(std::string_view cache_salt) const {
  return RootBlockHash(identity_, cache_salt);
}

KvCacheManager::Table& KvCacheManager::table(SequenceId seq) {
  auto it = tables_.find(seq);
  assert(it != tables_.end());
  return it->second;
}

const KvCacheManager::Table& KvCacheManager::table(SequenceId seq) const {
  auto it = tables_.find(seq);
  assert(it != tables_.end());
  return it->second;
}

int32_t KvCacheManager::Open(SequenceId seq, const BlockHash& root, std::span<const int32_t> tokens,
                             int32_t max_cached_tokens, bool record_stats) {
  auto [it, inserted] = tables_.try_emplace(seq);
  assert(inserted);
  (void)inserted;
  Table& t = it->second;
  t.root = root;
  const size_t bt = static_cast<size_t>(block_tokens());
  const size_t limit = std::min(tokens.size(), static_cast<size_t>(std::max(max_cached_tokens, 0)));
  const size_t candidates = limit / bt;
  // found[i]: the cached block with chain key hashes[i]. Resuming after k blocks needs
  // blocks [WindowStartBlock(k * bt), k) cached: scan runs of consecutive cached blocks
  // and keep the largest k whose window lies inside the run ending at k - 1. Without a
  // window that is the longest cached prefix, and the scan stops at its first miss.
  std::vector<BlockHash> hashes;
  std::vector<BlockId> found;
  size_t run_start = 0;
  size_t best = 0;
  BlockHash parent = root;
  for (size_t i = 0; i < candidates; ++i) {
    std::span<const int32_t> block_tokens = tokens.subspan(i * bt, bt);
    const BlockHash h = ChainBlockHash(parent, block_tokens);
    const std::optional<BlockId> id = pool_->Find(h, parent, block_tokens);
    hashes.push_back(h);
    found.push_back(id.value_or(kNoBlock));
    parent = h;
    if (!id.has_value()) {
      if (window_tokens_ == 0) break;
      run_start = i + 1;
      continue;
    }
    if (WindowStartBlock(static_cast<int64_t>((i + 1) * bt)) >= run_start) best = i + 1;
  }
  t.first_held = WindowStartBlock(static_cast<int64_t>(best * bt));
  for (size_t i = 0; i < best; ++i) {
    const bool held = i >= t.first_held;
    if (held) pool_->Ref(found[i]);
    t.blocks.push_back(held ? found[i] : kNoBlock);
    t.pointers.push_back(held ? pool_->data(found[i]) : nullptr);
    t.hashes.push_back(hashes[i]);
  }
  if (record_stats) {
    RecordPrefixLookup(static_cast<int64_t>(candidates), static_cast<int64_t>(best));
  }
  return static_cast<int32_t>(best * bt);
}

int32_t KvCacheManager::BlocksToReserve(SequenceId seq, int32_t num_tokens) const {
  const Table& t = table(seq);
  return std::max<int32_t>(0, BlocksFor(num_tokens) - static_cast<int32_t>(t.blocks.size()));
}

bool KvCacheManager::Reserve(SequenceId seq, int32_t num_tokens, bool reclaim_sessions) {
  Table& t = table(seq);
  const int32_t need = BlocksToReserve(seq, num_tokens);
  if (need == 0) return true;
  const size_t old_size = t.blocks.size();
  while (!pool_->Allocate(need, &t.blocks)) {
    if (!reclaim_sessions || !ReclaimOneSession()) return false;
  }
  for (size_t i = old_size; i < t.blocks.size(); ++i)
    t.pointers.push_back(pool_->data(t.blocks[i]));
  return true;
}

void KvCacheManager::Commit(SequenceId seq, std::span<const int32_t> tokens, int32_t num_computed) {
  Table& t = table(seq);
  const size_t bt = static_cast<size_t>(block_tokens());
  const size_t full =
      std::min(static_cast<size_t>(std::max(num_computed, 0)) / bt, t.blocks.size());
  for (size_t i = t.hashes.size(); i < full; ++i) {
    const BlockHash parent = i == 0 ? t.root : t.hashes[i - 1];
    std::span<const int32_t> block_tokens = tokens.subspan(i * bt, bt);
    const BlockHash h = ChainBlockHash(parent, block_tokens);
    // A false return means an identical block is already cached; ours stays private.
    pool_->Register(t.blocks[i], h, parent, block_tokens);
    t.hashes.push_back(h);
  }
  // Local attention: give back the blocks no later position reads (all committed).
  const size_t keep_from = std::min(WindowStartBlock(num_computed), t.hashes.size());
  if (keep_from > t.first_held) {
    pool_->Release(
        std::span<const BlockId>(t.blocks).subspan(t.first_held, keep_from - t.first_held));
    for (size_t i = t.first_held; i < keep_from; ++i) {
      t.blocks[i] = kNoBlock;
      t.pointers[i] = nullptr;
    }
    t.first_held = keep_from;
  }
}

std::span<uint8_t* const> KvCacheManager::BlockPointers(SequenceId seq) const {
  return table(seq).pointers;
}

int32_t KvCacheManager::committed_blocks(SequenceId seq) const {
  return static_cast<int32_t>(table(seq).hashes.size());
}

void KvCacheManager::Close(SequenceId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const Table& t = it->second;
  pool_->Release(std::span<const BlockId>(t.blocks).subspan(t.first_held));
  tables_.erase(it);
}

std::vector<BlockId> KvCacheManager::RefCommitted(SequenceId seq, std::span<const int32_t> tokens,
                                                  size_t first) {
  const Table& t = table(seq);
  const size_t bt = static_cast<size_t>(block_tokens());
  std::vector<BlockId> refs;
  refs.reserve(t.hashes.size());
  for (size_t i = first; i < t.hashes.size(); ++i) {
    const BlockHash parent = i == 0 ? t.root : t.hashes[i - 1];
    std::optional<BlockId> id = pool_->Find(t.hashes[i], parent, tokens.subspan(i * bt, bt));
    if (!id.has_value()) break;
    pool_->Ref(*id);
    refs.push_back(*id);
  }
  return refs;
}

void KvCacheManager::SetSessionBlocks(const std::string& session, std::vector<BlockId> blocks) {
  SessionBlocks& s = sessions_[session];
  pool_->Release(s.blocks);
  session_blocks_ += static_cast<int64_t>(blocks.size()) - static_cast<int64_t>(s.blocks.size());
  s.blocks = std::move(blocks);
  s.last_pinned = ++session_clock_;
}

void KvCacheManager::PinSession(const std::string& session, SequenceId seq,
                                std::span<const int32_t> tokens) {
  const int64_t committed_tokens = static_cast<int64_t>(table(seq).hashes.size()) * block_tokens();
  SetSessionBlocks(session, RefCommitted(seq, tokens, WindowStartBlock(committed_tokens)));
}

void KvCacheManager::ForkSession(const std::string& parent, const std::string& child) {
  std::vector<BlockId> blocks;
  if (auto it = sessions_.find(parent); it != sessions_.end()) blocks = it->second.blocks;
  for (BlockId id : blocks) pool_->Ref(id);
  SetSessionBlocks(child, std::move(blocks));
}

void KvCacheManager::ReleaseSession(const std::string& session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  pool_->Release(it->second.blocks);
  session_blocks_ -= static_cast<int64_t>(it->second.blocks.size());
  sessions_.erase(it);
}

void KvCacheManager::ReleaseAllSessions() {
  for (auto& [id, s] : sessions_) pool_->Release(s.blocks);
  sessions_.clear();
  session_blocks_ = 0;
}

int32_t KvCacheManager::session_blocks(const std::string& session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
}

bool KvCacheManager::ReclaimOneSession() {
  // Linear in the sessions, but only when the pool has run dry.
  SessionBlocks* victim = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.blocks.empty()) continue;
    if (victim == nullptr || s.last_pinned < victim->last_pinned) victim = &s;
  }
  if (victim == nullptr) return false;
  pool_->Release(victim->blocks);  // tail first: the chain's head stays cached longest
  session_blocks_ -= static_cast<int64_t>(victim->blocks.size());
  victim->blocks.clear();
  ++session_reclaims_total_;
  return true;
}

std::vector<BlockHash> KvCacheManager::ChainHashes(const BlockHash& root,
                                                   std::span<const int32_t> tokens,
                                                   int32_t num_blocks) const {
  const size_t bt = static_cast<size_t>(block_tokens());
  std::vector<BlockHash> chain;
  chain.reserve(static_cast<size_t>(std::max(num_blocks, 0)));
  BlockHash parent = root;
  for (int32_t i = 0; i < num_blocks; ++i) {
    parent = ChainBlockHash(parent, tokens.subspan(static_cast<size_t>(i) * bt, bt));
    chain.push_back(parent);
  }
  return chain;
}

int32_t KvCacheManager::CachedPrefixBlocks(const BlockHash& root, std::span<const int32_t> tokens,
                                           std::span<const BlockHash> chain) const {
  const size_t bt = static_cast<size_t>(block_tokens());
  int32_t n = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    const BlockHash& parent = i == 0 ? root : chain[i - 1];
    if (!pool_->Find(chain[i], parent, tokens.subspan(i * bt, bt)).has_value()) break;
    ++n;
  }
  return n;
}

std::vector<uint8_t*> KvCacheManager::ReserveImport(uint64_t key, const BlockHash& root,
                                                    std::span<const int32_t> tokens,
                                                    std::span<const BlockHash> chain, int32_t first,
                                                    int32_t count) {
  assert(!imports_.contains(key));
  assert(first >= 0 && count >= 0 && static_cast<size_t>(first) + count <= chain.size());
  const size_t bt = static_cast<size_t>(block_tokens());
  Import import{root, first, {}, {}};
  import.chain.assign(chain.begin(), chain.begin() + first);
  // The prefix first: held, it cannot be evicted by the allocation below.
  for (size_t i = 0; i < static_cast<size_t>(first); ++i) {
    const BlockHash& parent = i == 0 ? root : chain[i - 1];
    std::optional<BlockId> id = pool_->Find(chain[i], parent, tokens.subspan(i * bt, bt));
    if (!id.has_value()) {
      pool_->Release(import.blocks);
      return {};
    }
    pool_->Ref(*id);
    import.blocks.push_back(*id);
  }
  const int32_t n = std::min(count, pool_->num_available());
  std::vector<uint8_t*> out;
  if (n > 0 && pool_->Allocate(n, &import.blocks)) {
    for (int32_t j = 0; j < n; ++j) {
      out.push_back(pool_->data(import.blocks[static_cast<size_t>(first + j)]));
      import.chain.push_back(chain[static_cast<size_t>(first + j)]);
    }
  }
  import_blocks_ += static_cast<int64_t>(import.blocks.size());
  import_new_blocks_ += static_cast<int64_t>(import.blocks.size()) - first;
  imports_.emplace(key, std::move(import));
  return out;
}

int32_t KvCacheManager::FinishImport(uint64_t key, std::span<const int32_t> tokens,
                                     int32_t written) {
  auto it = imports_.find(key);
  if (it == imports_.end()) return 0;
  Import import = std::move(it->second);
  imports_.erase(it);
  import_blocks_ -= static_cast<int64_t>(import.blocks.size());
  import_new_blocks_ -= static_cast<int64_t>(import.blocks.size()) - import.first;
  const size_t bt = static_cast<size_t>(block_tokens());
  const size_t first = static_cast<size_t>(import.first);
  const size_t end =
      std::min(first + static_cast<size_t>(std::max(written, 0)), import.blocks.size());
  // held: the chain's blocks cached afterwards, referenced until the end; spare: ours
  // that are not (unwritten, a duplicate of a block someone else cached meanwhile, or
  // after a key that cannot be registered).
  std::vector<BlockId> held(import.blocks.begin(), import.blocks.begin() + first);
  std::vector<BlockId> spare;
  size_t i = first;
  for (; i < end; ++i) {
    const BlockHash& parent = i == 0 ? import.root : import.chain[i - 1];
    const std::span<const int32_t> block = tokens.subspan(i * bt, bt);
    const BlockId ours = import.blocks[i];
    if (std::optional<BlockId> cached = pool_->Find(import.chain[i], parent, block);
        cached.has_value()) {
      pool_->Ref(*cached);
      held.push_back(*cached);
      spare.push_back(ours);
    } else if (pool_->Register(ours, import.chain[i], parent, block)) {
      held.push_back(ours);
    } else {
      break;  // the key is another block's (tokens differ): the chain ends here
    }
  }
  spare.insert(spare.end(), import.blocks.begin() + i, import.blocks.end());
  const int32_t cached = static_cast<int32_t>(held.size());
  pool_->Release(spare);
  pool_->Release(held);  // tail first: the chain's head stays cached longest
  return cached;
}

std::vector<KvCacheManager::ExportBlock> KvCacheManager::PinExport(
    uint64_t key, SequenceId seq, std::span<const int32_t> tokens) {
  assert(!exports_.contains(key));
  std::vector<BlockId> blocks = RefCommitted(seq, tokens, 0);  // a whole chain from the root
  const Table& t = table(seq);
  std::vector<ExportBlock> out;
  out.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    out.push_back(
        ExportBlock{i == 0 ? t.root : t.hashes[i - 1], t.hashes[i], pool_->data(blocks[i])});
  }
  export_blocks_ += static_cast<int64_t>(blocks.size());
  exports_[key] = std::move(blocks);
  return out;
}

void KvCacheManager::ReleaseExport(uint64_t key) {
  auto it = exports_.find(key);
  if (it == exports_.end()) return;
  pool_->Release(it->second);
  export_blocks_ -= static_cast<int64_t>(it->second.size());
  exports_.erase(it);
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.blocks_total = pool_->num_blocks();
  s.blocks_used = pool_->num_used();
  s.blocks_cached = pool_->num_cached();
  s.blocks_free = pool_->num_free_uncached();
  s.prefix_queries_total = prefix_queries_total_;
  s.prefix_hits_total = prefix_hits_total_;
  s.evictions_total = pool_->evictions_total();
  s.session_blocks = session_blocks_;
  s.session_reclaims_total = session_reclaims_total_;
  return s;
}

}  // namespace kvserve::cache
