// Content keys of full KV blocks for automatic prefix caching.
#ifndef KVSERVE_CACHE_BLOCK_HASH_H_
#define KVSERVE_CACHE_BLOCK_HASH_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "model/kv_layout.h"

namespace kvserve::cache {

// A 128-bit content key. The key of block i of a sequence is chained:
//   key(i) = H(key(i-1), tokens of block i), with key(-1) = RootBlockHash(identity, salt),
// so two blocks share a key only when the KV identity (model, layout, element type, block
// size), the salt and every token from position 0 to the end of the block are the same
// (up to a 2^-128-ish collision chance, which the pool rules out further by comparing the
// block's own tokens and parent key on a hit). Keys are MurmurHash3 x64 128 with fixed
// seeds over little-endian bytes: every process on every host computes the same keys,
// which the session cache service (cachesvc/) relies on.
struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockHash& a, const BlockHash& b) {
    return a.lo == b.lo && a.hi == b.hi;
  }
  friend bool operator!=(const BlockHash& a, const BlockHash& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.lo, b.hi);
  }
};

// What KV a block holds, apart from its tokens: blocks of different identities are never
// interchangeable.
struct KvIdentity {
  // model::Model::fingerprint(): architecture, hyper-parameters, the tokenizer's
  // vocabulary and the weights.
  uint64_t model_fingerprint = 0;
  // Heads the kv_dim of the layout splits into (0 when the caller does not know).
  int32_t kv_heads = 0;
  // Layers, kv_dim, planes, block size and KV element type.
  model::KvLayout layout;
};

// The identity digest of (identity, cache salt) (empty salt = no salt; distinct from every
// non-empty salt): the key every chain starts from, and the partition the session cache
// service files the chain's blocks under.
BlockHash RootBlockHash(const KvIdentity& identity, std::string_view cache_salt);

// key(i) from key(i-1) (`parent`) and the token ids of block i (all block_tokens of them).
BlockHash ChainBlockHash(const BlockHash& parent, std::span<const int32_t> block_tokens);

// MurmurHash3 x64 128 of `bytes` with `seed` (exposed for tests).
BlockHash Murmur3x64_128(std::span<const uint8_t> bytes, uint64_t seed);

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_BLOCK_HASH_H_
