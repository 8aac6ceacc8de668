// The Backend interface: one forward step over a batch of sequences.
#ifndef KVSERVE_BACKENDS_BACKEND_H_
#define KVSERVE_BACKENDS_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace kvserve::backends {

// One sequence's part of a step: its new tokens and a view of its KV blocks.
struct SequenceInput {
  // New token ids, at positions [cached_tokens, cached_tokens + tokens.size()).
  std::span<const int32_t> tokens;
  // Positions already in the KV blocks (the backend reads them, never writes them).
  int32_t cached_tokens = 0;
  // KV blocks of this sequence, in position order, each KvLayout::block_bytes() long.
  // Must cover every position up to cached_tokens + tokens.size(). The backend
  // writes K/V of the new tokens into them. Memory belongs to the caller. With local
  // attention (ModelConfig::sliding_window) the blocks wholly before the window of the
  // first new token may be null: they are never read.
  std::span<uint8_t* const> blocks;
  // When false the LM head is skipped for this sequence and its logits rows are left
  // untouched (a prefill chunk that does not end the prompt).
  bool want_logits = true;
  // With want_logits: logits are written for the LAST logits_rows new tokens, in
  // position order (1 <= logits_rows <= tokens.size()). A step that verifies draft
  // tokens (speculative decoding) asks for every position it feeds. Default 1.
  int32_t logits_rows = 1;
};

struct Batch {
  std::vector<SequenceInput> sequences;
};

// The logits of a step are rows of vocab_size floats: sequence i owns logits_rows of
// them (also when it does not want logits), after those of sequences 0..i-1. With the
// default logits_rows = 1, row i is sequence i's.
// LogitRowCount: the rows a batch's logits buffer must hold.
inline size_t LogitRowCount(const Batch& batch) {
  size_t rows = 0;
  for (const SequenceInput& s : batch.sequences) rows += static_cast<size_t>(s.logits_rows);
  return rows;
}
// LogitRowStarts: each sequence's first row (size sequences.size()).
inline std::vector<size_t> LogitRowStarts(const Batch& batch) {
  std::vector<size_t> starts;
  starts.reserve(batch.sequences.size());
  size_t row = 0;
  for (const SequenceInput& s : batch.sequences) {
    starts.push_back(row);
    row += static_cast<size_t>(s.logits_rows);
  }
  return starts;
}

struct BackendOptions {
  // Worker threads for attention and kernels; 0 = all cores. OpenBLAS is limited to
  // the same count so the two never oversubscribe the machine. Default: 0.
  int threads = 0;
  // cpu_blas on CPUs with AVX2: multiply f32 projections in 16-row panels
  // (cpu_blas::GemmOptions::f32_panels). Default true.
  bool f32_panels = true;
  // cpu_blas on CPUs with AVX2: multiply bf16 projections in 16-row panels
  // (cpu_blas::GemmOptions::bf16_panels). Default true.
  bool bf16_panels = true;
  // cpu_blas: which kernel multiplies those bf16 panels (cpu_blas::
  // GemmOptions::bf16_panel_kernel): "auto" (the faster on this CPU, measured once per
  // process), "dpbf16" or "fma"; another name is INVALID_ARGUMENT. Default "auto".
  std::string bf16_panel_kernel = "auto";
  // cpu_blas on CPUs with AVX-512 VNNI: multiply q4_0, q8_0, q4_K and q6_K projections in
  // 16-row panels (cpu_blas::GemmOptions::quant_panels). Default true.
  bool quant_panels = true;
  // cpu_blas: q6_K panels unpacked once per slab for many activation rows
  // (cpu_blas::GemmOptions::quant_unpack; the same results). Default true.
  bool quant_unpack = true;
  // cpu_blas: every K/V row and logit row computed with the same arithmetic whatever the
  // batch, the prefill chunking or the cache state (cpu_blas::GemmOptions::
  // batch_invariant); false allows OpenBLAS sgemm for prefill, which rounds differently.
  // The reference backend always is. Default true.
  bool batch_invariant = true;
  // cpu_blas: the kernel level by name (cpu_blas::IsaName: scalar, avx2, avx_vnni, avx512,
  // avx512vnni, avx512bf16 on x86-64; neon, neon_dotprod, neon_i8mm on AArch64), for measuring a
  // lower level on a better CPU; an unknown name is INVALID_ARGUMENT, a level the CPU lacks
  // FAILED_PRECONDITION. Empty: the best the CPU supports. Default "".
  std::string kernel_level;
};

// Runs the model. A backend holds only scratch buffers and read-only weights; it owns
// no KV memory. Threading: Forward is not reentrant — call it from one thread at a time
// (the engine's step thread). Different Backend objects are independent.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual const model::KvLayout& kv_layout() const = 0;

  // Computes one step. For each sequence i: embeds its new tokens, and in every layer
  // computes Q/K/V of the new tokens only, appends K/V into its blocks, attends
  // causally over all cached plus new K/V (only the last sliding_window positions with
  // local attention), and runs the FFN; then, if want_logits, writes the logits of its
  // last logits_rows new tokens to its rows (LogitRowStarts). `logits` must hold
  // LogitRowCount(batch) * vocab_size floats. The logits of a position do not depend on
  // how many rows are asked for.
  // Errors: INVALID_ARGUMENT when a sequence has no tokens, a token id is out of range,
  // positions exceed the context length, blocks do not cover the positions, or
  // logits_rows is out of [1, tokens.size()].
  virtual absl::Status Forward(const Batch& batch, std::span<float> logits) = 0;
};

// Creates a backend by name ("reference" or "cpu_blas") for `model`, which must
// outlive it. NOT_FOUND for an unknown name.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name,
                                                       const model::Model& model,
                                                       const model::KvLayout& kv_layout,
                                                       const BackendOptions& options);

// The weight types CreateBackend(name, ..., options) multiplies in panel layouts on this
// CPU (the cpu_blas backend: bf16 at kernel level avx512bf16, q4_0 and q8_0 from
// avx512vnni), so that a model loaded for it alone is best loaded with
// model::LoadOptions::panels set to them (resident once).
model::PanelTypes BackendReadsPanels(const std::string& name, const BackendOptions& options);

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_BACKEND_H_
