// Chains of valid block records for tests and benchmarks of block stores. Test-only.
#ifndef KVSERVE_CACHESVC_TESTING_TEST_CHAIN_H_
#define KVSERVE_CACHESVC_TESTING_TEST_CHAIN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_record.h"
#include "cachesvc/block_store.h"
#include "model/kv_layout.h"

namespace kvserve::cachesvc::testing {

// A small layout: records of 128 + 16 + 256 bytes.
inline constexpr model::KvLayout kSmallLayout{2, 8, 4, model::DType::kF32};

// The blocks of one chain: keys[i]'s parent is parents[i] (partition for i == 0).
struct TestChain {
  BlockHash partition;
  std::vector<BlockHash> keys;
  std::vector<BlockHash> parents;
  std::vector<RecordPtr> records;
};

// `blocks` blocks of partition RootBlockHash(identity of `layout`, `salt`), whose tokens
// depend on `seed` (chains of equal salt and seed are equal; different seeds diverge
// from their first block).
inline TestChain MakeTestChain(std::string_view salt, int blocks, int32_t seed = 0,
                               const model::KvLayout& layout = kSmallLayout) {
  TestChain chain;
  chain.partition = cache::RootBlockHash(cache::KvIdentity{42, 0, layout}, salt);
  BlockHash parent = chain.partition;
  std::vector<int32_t> tokens(layout.block_tokens);
  std::vector<uint8_t> payload(layout.block_bytes());
  for (int b = 0; b < blocks; ++b) {
    for (size_t t = 0; t < tokens.size(); ++t) {
      tokens[t] = static_cast<int32_t>(seed * 100'003 + b * 1'000 + static_cast<int32_t>(t));
    }
    for (size_t i = 0; i < payload.size(); ++i) {
      payload[i] =
          static_cast<uint8_t>(i * 31 + static_cast<size_t>(b) + static_cast<size_t>(seed));
    }
    const BlockHash key = cache::ChainBlockHash(parent, tokens);
    auto record = std::make_shared<std::string>();
    cache::EncodeBlockRecord(chain.partition, parent, key, tokens, layout, 0, payload,
                             record.get());
    chain.keys.push_back(key);
    chain.parents.push_back(parent);
    chain.records.push_back(std::move(record));
    parent = key;
  }
  return chain;
}

}  // namespace kvserve::cachesvc::testing

#endif  // KVSERVE_CACHESVC_TESTING_TEST_CHAIN_H_
