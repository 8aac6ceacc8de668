#include "backends/kv_arena.h"

#include <cstdint>
#include <utility>

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
  block_count_ += n_blocks;
  // Blocks at a 64-byte multiple stride inside one region, for sequences worth it.
  const size_t stride = (layout_.block_bytes() + kAlignment - 1) / kAlignment * kAlignment;
  const size_t bytes = static_cast<size_t>(n_blocks) * stride;
  if (bytes >= common::HugePageMemory::kHugePageBytes) {
    absl::StatusOr<common::HugePageMemory> region =
        common::HugePageMemory::Allocate(bytes, populate_);
    if (region.ok()) {
      for (int64_t b = 0; b < n_blocks; ++b) {
        pointers->push_back(region->data() + static_cast<size_t>(b) * stride);
      }
      regions_.push_back(*std::move(region));
      sequences_.push_back(std::move(pointers));
      return *sequences_.back();
    }
    // Mapping failed: fall back to one allocation per block below.
  }
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
