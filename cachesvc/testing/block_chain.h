// Test and benchmark helper: a chain of valid block records (cache/block_record.h) for
// one identity, built deterministically from a salt and a seed, for the block stores and
// the SessionCache service and its clients. Not for production code.
#ifndef KVSERVE_CACHESVC_TESTING_BLOCK_CHAIN_H_
#define KVSERVE_CACHESVC_TESTING_BLOCK_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_record.h"
#include "cachesvc/block_store.h"
#include "model/kv_layout.h"

namespace kvserve::cachesvc::testing {

struct BlockChain {
  cache::BlockHash partition;  // the identity digest (chain root)
  std::vector<cache::BlockHash> hashes;
  std::vector<std::string> records;  // records[i] is the record of hashes[i]

  // The chain parent of block i: the partition for the first block.
  const cache::BlockHash& parent(size_t i) const { return i == 0 ? partition : hashes[i - 1]; }
  // Record i as the block stores take it (a copy).
  RecordPtr record(size_t i) const { return std::make_shared<const std::string>(records[i]); }
};

// A small layout for tests: 2 layers, kv_dim 8, 4 tokens a block, f32 (records of
// 128 + 16 + 256 bytes).
inline constexpr model::KvLayout kSmallLayout{2, 8, 4, model::DType::kF32};

// `blocks` records of the chain of identity (layout, salt); tokens and payload derive
// from `seed`, so equal seeds give equal chains and different seeds diverge at block 0.
inline BlockChain MakeChain(int blocks, const std::string& salt, uint32_t seed = 1,
                            const model::KvLayout& layout = kSmallLayout) {
  BlockChain chain;
  cache::KvIdentity identity;
  identity.model_fingerprint = 42;
  identity.kv_heads = 2;
  identity.layout = layout;
  chain.partition = cache::RootBlockHash(identity, salt);
  cache::BlockHash parent = chain.partition;
  uint32_t state = seed * 2654435761u + 1;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  std::vector<uint8_t> payload(layout.block_bytes());
  for (int b = 0; b < blocks; ++b) {
    std::vector<int32_t> tokens(static_cast<size_t>(layout.block_tokens));
    for (int32_t& t : tokens) t = static_cast<int32_t>(next() % 32000);
    for (size_t i = 0; i < payload.size(); i += 4096) payload[i] = static_cast<uint8_t>(next());
    const cache::BlockHash hash = cache::ChainBlockHash(parent, tokens);
    std::string record;
    cache::EncodeBlockRecord(chain.partition, parent, hash, tokens, layout, identity.kv_heads,
                             payload, &record);
    chain.hashes.push_back(hash);
    chain.records.push_back(std::move(record));
    parent = hash;
  }
  return chain;
}

}  // namespace kvserve::cachesvc::testing

#endif  // KVSERVE_CACHESVC_TESTING_BLOCK_CHAIN_H_
