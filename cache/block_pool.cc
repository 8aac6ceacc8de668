#include "cache/block_pool.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::cache {

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(const Options& options) {
  const model::KvLayout& l = options.layout;
  if (l.n_layers <= 0 || l.kv_dim <= 0 || l.block_tokens <= 0 || l.planes < 1 || l.planes > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv layout must have positive n_layers, kv_dim and block_tokens and 1 or 2 planes, got ",
        l.n_layers, ", ", l.kv_dim, ", ", l.block_tokens, ", ", l.planes));
  }
  const size_t block_bytes = l.block_bytes();
  const size_t n = options.budget_bytes / block_bytes;
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv budget of ", options.budget_bytes, " bytes holds no block of ", block_bytes, " bytes"));
  }
  if (n > static_cast<size_t>(INT32_MAX / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("kv budget gives too many blocks: ", n));
  }
  std::unique_ptr<BlockPool> pool(new BlockPool(l, static_cast<int32_t>(n)));
  // Huge pages: attention reads rows scattered over the whole pool every step, which on
  // 4 KiB pages is a TLB miss per row (see common/huge_page_memory.h).
  absl::StatusOr<common::HugePageMemory> memory =
      common::HugePageMemory::Allocate(n * block_bytes, options.populate);
  if (!memory.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", n * block_bytes, " bytes of kv blocks: ", memory.status().message()));
  }
  pool->memory_ = *std::move(memory);
  pool->base_ = pool->memory_.data();
  return pool;
}

BlockPool::BlockPool(const model::KvLayout& layout, int32_t num_blocks)
    : layout_(layout), block_bytes_(layout.block_bytes()), meta_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  // Stack: block 0 is handed out first.
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

BlockPool::~BlockPool() = default;

uint8_t* BlockPool::data(BlockId id) const {
  return base_ + static_cast<size_t>(id) * block_bytes_;
}

bool BlockPool::Allocate(int32_t n, std::vector<BlockId>* out) {
  if (n < 0 || n > num_available()) return false;
  for (int32_t i = 0; i < n; ++i) {
    BlockId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = lru_head_;
      LruRemove(id);
      Unregister(id);
      ++evictions_total_;
    }
    Meta& m = meta_[static_cast<size_t>(id)];
    m.ref_count = 1;
    ++num_used_;
    out->push_back(id);
  }
  return true;
}

std::optional<BlockId> BlockPool::Find(const BlockHash& hash, const BlockHash& parent,
                                       std::span<const int32_t> tokens) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const Meta& m = meta_[static_cast<size_t>(it->second)];
  if (m.parent != parent ||
      !std::equal(m.tokens.begin(), m.tokens.end(), tokens.begin(), tokens.end())) {
    return std::nullopt;  // a hash collision: never share
  }
  return it->second;
}

void BlockPool::Ref(BlockId id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (m.ref_count == 0) {
    // Only registered blocks can be found with ref_count 0.
    assert(m.registered);
    LruRemove(id);
    ++num_used_;
  }
  ++m.ref_count;
}

void BlockPool::Release(std::span<const BlockId> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const BlockId id = *it;
    Meta& m = meta_[static_cast<size_t>(id)];
    assert(m.ref_count > 0);
    if (--m.ref_count > 0) continue;
    --num_used_;
    if (m.registered) {
      LruPushBack(id);
    } else {
      free_.push_back(id);
    }
  }
}

bool BlockPool::Register(BlockId id, const BlockHash& hash, const BlockHash& parent,
                         std::span<const int32_t> tokens) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (m.registered) return m.hash == hash;
  auto [it, inserted] = index_.try_emplace(hash, id);
  if (!inserted) return false;
  m.registered = true;
  m.hash = hash;
  m.parent = parent;
  m.tokens.assign(tokens.begin(), tokens.end());
  return true;
}

void BlockPool::Unregister(BlockId id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  index_.erase(m.hash);
  m.registered = false;
  m.tokens.clear();
}

void BlockPool::LruPushBack(BlockId id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  if (lru_tail_ >= 0) {
    meta_[static_cast<size_t>(lru_tail_)].lru_next = id;
  } else {
    lru_head_ = id;
  }
  lru_tail_ = id;
  ++lru_size_;
}

void BlockPool::LruRemove(BlockId id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (m.lru_prev >= 0) {
    meta_[static_cast<size_t>(m.lru_prev)].lru_next = m.lru_next;
  } else {
    lru_head_ = m.lru_next;
  }
  if (m.lru_next >= 0) {
    meta_[static_cast<size_t>(m.lru_next)].lru_prev = m.lru_prev;
  } else {
    lru_tail_ = m.lru_prev;
  }
  m.lru_prev = m.lru_next = -1;
  --lru_size_;
}

}  // namespace kvserve::cache
