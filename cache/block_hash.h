// Content keys of full KV blocks for automatic prefix caching.
#ifndef KVSERVE_CACHE_BLOCK_HASH_H_
#define KVSERVE_CACHE_BLOCK_HASH_H_

#include <cstdint>
#include <span>
#include <string_view>

namespace kvserve::cache {

// A 128-bit content key. The key of block i of a sequence is chained:
//   key(i) = H(key(i-1), tokens of block i), with key(-1) = RootBlockHash(model, salt),
// so two blocks share a key only when the model, the salt and every token from position 0
// to the end of the block are the same (up to a 2^-128-ish collision chance, which the
// pool rules out further by comparing the block's own tokens and parent key on a hit).
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

// The extra keys every chain starts from: the model fingerprint and the per-tenant cache
// salt (empty = no salt; distinct from every non-empty salt).
BlockHash RootBlockHash(uint64_t model_fingerprint, std::string_view cache_salt);

// key(i) from key(i-1) (`parent`) and the token ids of block i (all block_tokens of them).
BlockHash ChainBlockHash(const BlockHash& parent, std::span<const int32_t> block_tokens);

// MurmurHash3 x64 128 of `bytes` with `seed` (exposed for tests).
BlockHash Murmur3x64_128(std::span<const uint8_t> bytes, uint64_t seed);

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_BLOCK_HASH_H_
