#include "bench/bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/stats.h"

namespace kvserve::bench {
namespace {

constexpr size_t kLine = 64;

// Each kernel reads `streams` regions of `region_bytes` (a multiple of 64) starting
// at `base`, `region_bytes` apart, interleaving one 64-byte line of each per step, and
// returns a value that depends on every byte so no load can be elided.
using ReadKernel = uint64_t (*)(const uint8_t* base, size_t region_bytes, int streams);

__attribute__((target("avx512f"))) uint64_t ReadAvx512(const uint8_t* base, size_t region_bytes,
                                                       int streams) {
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (size_t off = 0; off < region_bytes; off += kLine) {
    for (int s = 0; s < streams; ++s) {
      const auto* p = reinterpret_cast<const __m512i*>(base + s * region_bytes + off);
      acc[s & 7] = _mm512_add_epi64(acc[s & 7], _mm512_load_si512(p));
    }
  }
  __m512i total = acc[0];
  for (int i = 1; i < 8; ++i) total = _mm512_add_epi64(total, acc[i]);
  // Not _mm512_reduce_add_epi64: GCC 12 warns inside it (-Werror=uninitialized).
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, total);
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2"))) uint64_t ReadAvx2(const uint8_t* base, size_t region_bytes,
                                                  int streams) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (size_t off = 0; off < region_bytes; off += kLine) {
    for (int s = 0; s < streams; ++s) {
      const auto* p = reinterpret_cast<const __m256i*>(base + s * region_bytes + off);
      const int a = (s * 2) & 7;
      acc[a] = _mm256_add_epi64(acc[a], _mm256_load_si256(p));
      acc[a + 1] = _mm256_add_epi64(acc[a + 1], _mm256_load_si256(p + 1));
    }
  }
  __m256i total = acc[0];
  for (int i = 1; i < 8; ++i) total = _mm256_add_epi64(total, acc[i]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t ReadScalar(const uint8_t* base, size_t region_bytes, int streams) {
  uint64_t acc[8] = {};
  for (size_t off = 0; off < region_bytes; off += kLine) {
    for (int s = 0; s < streams; ++s) {
      const auto* p = reinterpret_cast<const uint64_t*>(base + s * region_bytes + off);
      for (int i = 0; i < 8; ++i) acc[i] += p[i];
    }
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

absl::StatusOr<BandwidthResult> MeasureReadBandwidth(const BandwidthOptions& options) {
  const int threads = options.threads;
  const int streams = options.streams_per_thread;
  if (threads <= 0 || streams <= 0 || options.passes <= 0) {
    return absl::InvalidArgumentError("bandwidth probe: threads, streams and passes must be > 0");
  }
  // Every region is a whole number of lines and at least 64 KiB.
  const size_t regions = static_cast<size_t>(threads) * static_cast<size_t>(streams);
  const size_t region_bytes = options.buffer_bytes / regions / kLine * kLine;
  if (region_bytes < (size_t{64} << 10)) {
    return absl::InvalidArgumentError(absl::StrCat("bandwidth probe: buffer of ",
                                                   options.buffer_bytes, " bytes is too small for ",
                                                   regions, " streams"));
  }
  const size_t total_bytes = region_bytes * regions;
  std::unique_ptr<uint8_t, FreeDeleter> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(kLine, total_bytes)));
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("bandwidth probe: cannot allocate ", total_bytes, " bytes"));
  }

  BandwidthResult result;
  ReadKernel kernel = ReadScalar;
  result.kernel = "scalar";
  if (__builtin_cpu_supports("avx512f")) {
    kernel = ReadAvx512;
    result.kernel = "avx512";
  } else if (__builtin_cpu_supports("avx2")) {
    kernel = ReadAvx2;
    result.kernel = "avx2";
  }

  // Workers and this thread meet at the barrier before and after every pass. Each worker
  // stamps its own start and end, and a pass lasts from the first start to the last end:
  // timestamps taken by this thread could come late when it is descheduled.
  using Clock = std::chrono::steady_clock;
  std::barrier sync(threads + 1);
  std::vector<uint64_t> sinks(static_cast<size_t>(threads), 0);
  // [passes, threads] start and end of each worker's read.
  std::vector<Clock::time_point> starts(static_cast<size_t>(threads * options.passes));
  std::vector<Clock::time_point> ends(starts.size());
  std::vector<std::thread> workers;
  const size_t slice_bytes = region_bytes * static_cast<size_t>(streams);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      uint8_t* slice = buffer.get() + static_cast<size_t>(t) * slice_bytes;
      // First touch from the reading thread; a non-zero pattern so pages are real.
      std::memset(slice, 0x5a + t, slice_bytes);
      sync.arrive_and_wait();
      for (int pass = 0; pass < options.passes; ++pass) {
        const size_t slot = static_cast<size_t>(pass * threads + t);
        sync.arrive_and_wait();
        starts[slot] = Clock::now();
        sinks[static_cast<size_t>(t)] += kernel(slice, region_bytes, streams);
        ends[slot] = Clock::now();
        sync.arrive_and_wait();
      }
    });
  }
  sync.arrive_and_wait();  // buffer filled
  for (int pass = 0; pass < options.passes; ++pass) {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
  }
  for (std::thread& w : workers) w.join();
  std::vector<double> gbs;
  for (int pass = 0; pass < options.passes; ++pass) {
    const auto first = starts.begin() + pass * threads;
    const auto last = ends.begin() + pass * threads;
    const Clock::time_point start = *std::min_element(first, first + threads);
    const Clock::time_point end = *std::max_element(last, last + threads);
    const double seconds = std::chrono::duration<double>(end - start).count();
    gbs.push_back(static_cast<double>(total_bytes) / seconds / 1e9);
  }
  // Every byte was read: the sums must be non-zero (the fill pattern is non-zero).
  for (uint64_t s : sinks) {
    if (s == 0) return absl::InternalError("bandwidth probe: reader returned no data");
  }
  const common::Summary summary = common::Summarize(gbs);
  result.best_gbs = summary.max;
  result.median_gbs = summary.median;
  result.worst_gbs = summary.min;
  return result;
}

}  // namespace kvserve::bench
