#include "backends/kv_arena.h"

#include <cstdint>

namespace kvserve::backends {
namespace {
constexpr size_t kAlignment = 64;
}  // namespace

std::span<uint8_t* const> KvArena::Allocate(int64_t capacity_tokens) {
  auto pointers = std::make_unique<std::vector<uint8_t*>>();
  // No blocks rather than a division by zero for a layout ValidateKvLayout would reject.
  const int64_t n_blocks =
      capacity_tokens <= 0 || layout_.block_tokens <= 0
          ? 0
          : (capacity_tokens + layout_.block_tokens - 1) / layout_.block_tokens;
  for (int64_t b = 0; b < n_blocks; ++b) {
    // Zero-filled; the block starts at the first 64-byte boundary inside the buffer.
    std::vector<uint8_t>& buffer = storage_.emplace_back(layout_.block_bytes() + kAlignment - 1);
    const auto address = reinterpret_cast<uintptr_t>(buffer.data());
    pointers->push_back(buffer.data() + (kAlignment - address % kAlignment) % kAlignment);
  }
  sequences_.push_back(std::move(pointers));
  return *sequences_.back();
}

}  // namespace kvserve::backends
