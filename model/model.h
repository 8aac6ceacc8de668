// A loaded model: configuration, weights, vocabulary, and the memory that backs them.
#ifndef KVSERVE_MODEL_MODEL_H_
#define KVSERVE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/panels.h"
#include "model/vocabulary.h"
#include "model/weights.h"

namespace kvserve::model {

// How Model::Load holds the weights file in memory.
struct LoadOptions {
  // Read the file into memory backed by transparent huge pages (FileResidency::kHugePages:
  // private, resident, faster to stream) instead of mapping it (kMapped: shared with the
  // page cache, can be dropped under memory pressure). Default true.
  bool huge_pages = true;
  // Repack the projection matrices of these types into the panel layouts of the cpu_blas
  // kernels (panels.h) and hand the pages of their row-major bytes back, so the weights
  // are resident once. Then only readers of those layouts can use the model (the cpu_blas
  // backend at kernel level avx512 for f32, avx512bf16 for bf16, avx512vnni for the
  // quantized types; the
  // reference backend refuses it). engine::LoadModel sets it where the backend wants it. The
  // fingerprint is that of the file either way. Default: none.
  PanelTypes panels;
  // Threads that pack the panels (PanelPackOptions::threads); 0 or less = one per core.
  // Default 0.
  int pack_threads = 0;
};

// Immutable after loading; safe to share between threads.
class Model {
 public:
  // Loads a GGUF file, or a llama2.c checkpoint when `tokenizer_path` is given
  // (or the file does not start with the GGUF magic and a sibling tokenizer exists).
  // Every error names the file and the problem (INVALID_ARGUMENT for malformed
  // content, NOT_FOUND for missing files).
  // Sibling tokenizers tried beside a llama2.c checkpoint, in order: tokenizer.bin,
  // tok<vocab_size>.bin (e.g. tok512.bin). A tokenizer_path given with a GGUF file is
  // INVALID_ARGUMENT (GGUF carries its own vocabulary). `options` applies to the weights
  // file only (a llama2.c tokenizer is mapped). Implemented in model_load.cc.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                                     const std::string& tokenizer_path = "",
                                                     const LoadOptions& options = {});

  // Assembles a model from parts (used by the format readers and by tests that
  // build random models). `storage` keeps the bytes that `weights` point into alive.
  static absl::StatusOr<std::unique_ptr<Model>> FromParts(ModelConfig config, ModelWeights weights,
                                                          Vocabulary vocab,
                                                          std::shared_ptr<const void> storage);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Vocabulary& vocab() const { return vocab_; }
  // XXH3-64 of the config, the vocabulary (pieces, scores, kinds, special ids) and every
  // weight byte: the same for the same file in every process and on every host. Part of
  // every KV block's identity (cache::KvIdentity), so KV is never shared between models.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  Vocabulary vocab_;
  std::shared_ptr<const void> storage_;
  std::shared_ptr<const void> panels_;  // LoadOptions::panels: the packed matrices
  uint64_t fingerprint_ = 0;
};

// Reads only the vocabulary of a GGUF file (which may hold no tensors at all, as the
// vocabulary-only files llama.cpp tests with): VocabularyFromGguf on the parsed file.
// NOT_FOUND for a missing file, INVALID_ARGUMENT (naming the file) for anything else.
// Implemented in model_load.cc.
absl::StatusOr<Vocabulary> LoadVocabulary(const std::string& path);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_MODEL_H_
