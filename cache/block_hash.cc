#include "cache/block_hash.h"

#include <cstring>
#include <vector>

namespace kvserve::cache {
namespace {

// Domain seeds keep root keys and chained keys in different hash families.
constexpr uint64_t kRootSeed = 0x6b7673657276652dULL;   // "kvserve-"
constexpr uint64_t kChainSeed = 0x626c6f636b686173ULL;  // "blockhas"

inline uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // little-endian hosts only (x86-64, aarch64)
  return v;
}

void AppendU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

BlockHash Murmur3x64_128(std::span<const uint8_t> bytes, uint64_t seed) {
  constexpr uint64_t c1 = 0x87c37b91114253d5ULL;
  constexpr uint64_t c2 = 0x4cf5ad432745937fULL;
  const size_t len = bytes.size();
  const size_t nblocks = len / 16;
  uint64_t h1 = seed;
  uint64_t h2 = seed;
  const uint8_t* data = bytes.data();
  for (size_t i = 0; i < nblocks; ++i) {
    uint64_t k1 = Load64(data + 16 * i);
    uint64_t k2 = Load64(data + 16 * i + 8);
    k1 *= c1;
    k1 = Rotl64(k1, 31);
    k1 *= c2;
    h1 ^= k1;
    h1 = Rotl64(h1, 27);
    h1 += h2;
    h1 = h1 * 5 + 0x52dce729;
    k2 *= c2;
    k2 = Rotl64(k2, 33);
    k2 *= c1;
    h2 ^= k2;
    h2 = Rotl64(h2, 31);
    h2 += h1;
    h2 = h2 * 5 + 0x38495ab5;
  }
  const uint8_t* tail = data + 16 * nblocks;
  const size_t rest = len & 15;
  uint64_t k1 = 0;
  uint64_t k2 = 0;
  for (size_t i = 0; i < rest; ++i) {
    if (i < 8) {
      k1 ^= static_cast<uint64_t>(tail[i]) << (8 * i);
    } else {
      k2 ^= static_cast<uint64_t>(tail[i]) << (8 * (i - 8));
    }
  }
  if (rest > 8) {
    k2 *= c2;
    k2 = Rotl64(k2, 33);
    k2 *= c1;
    h2 ^= k2;
  }
  if (rest > 0) {
    k1 *= c1;
    k1 = Rotl64(k1, 31);
    k1 *= c2;
    h1 ^= k1;
  }
  h1 ^= static_cast<uint64_t>(len);
  h2 ^= static_cast<uint64_t>(len);
  h1 += h2;
  h2 += h1;
  h1 = Fmix64(h1);
  h2 = Fmix64(h2);
  h1 += h2;
  h2 += h1;
  return BlockHash{h1, h2};
}

BlockHash RootBlockHash(const KvIdentity& identity, std::string_view cache_salt) {
  // [fingerprint][kv_heads][n_layers][kv_dim][block_tokens][dtype]([planes] unless 2)
  // [salt length][salt bytes], each number a u64: the length keeps "" distinct. Two-plane
  // layouts leave planes out, so their digests are those from before MLA.
  std::vector<uint8_t> bytes;
  bytes.reserve(56 + cache_salt.size());
  AppendU64(bytes, identity.model_fingerprint);
  const model::KvLayout& l = identity.layout;
  for (int64_t v : {int64_t{identity.kv_heads}, int64_t{l.n_layers}, int64_t{l.kv_dim},
                    int64_t{l.block_tokens}, static_cast<int64_t>(l.dtype)}) {
    AppendU64(bytes, static_cast<uint64_t>(v));
  }
  if (l.planes != 2) AppendU64(bytes, static_cast<uint64_t>(l.planes));
  AppendU64(bytes, cache_salt.size());
  bytes.insert(bytes.end(), cache_salt.begin(), cache_salt.end());
  return Murmur3x64_128(bytes, kRootSeed);
}

BlockHash ChainBlockHash(const BlockHash& parent, std::span<const int32_t> block_tokens) {
  // [parent.lo u64][parent.hi u64][token ids, i32 little-endian each].
  std::vector<uint8_t> bytes;
  bytes.reserve(16 + 4 * block_tokens.size());
  AppendU64(bytes, parent.lo);
  AppendU64(bytes, parent.hi);
  for (int32_t t : block_tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  return Murmur3x64_128(bytes, kChainSeed);
}

}  // namespace kvserve::cache
