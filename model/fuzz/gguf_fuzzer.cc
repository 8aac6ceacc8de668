// libFuzzer target: arbitrary bytes through the GGUF container parser, then
//   - the vocabulary and the tokenizer built on it, as the server builds them for a model
//     it attaches (VocabularyFromGguf, Tokenizer::Create: pieces, merges, pre-tokenizer,
//     special tokens), which encodes and decodes a short text; and
//   - the llama mapping (config, vocabulary, weights, Model::FromParts).
// Seeds: tiny models of each architecture and vocabulary-only files (SentencePiece and
// byte-level BPE). Any crash, sanitizer report or leak is a bug; errors are expected and
// ignored.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/fuzz/exercise_tokenizer.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy: aligned like an mmap'd file, and any read past the
  // end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data, data + size);
  absl::StatusOr<kvserve::model::GgufFile> file =
      kvserve::model::ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
  if (!file.ok()) return 0;
  absl::StatusOr<kvserve::model::Vocabulary> vocab = kvserve::model::VocabularyFromGguf(*file);
  if (vocab.ok()) kvserve::model::fuzz::ExerciseTokenizer(*std::move(vocab));
  (void)kvserve::model::ModelFromGguf(*file, nullptr);
  return 0;
}
