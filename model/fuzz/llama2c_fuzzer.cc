// libFuzzer target: arbitrary bytes through the llama2.c checkpoint and tokenizer.bin
// readers (both read untrusted files). The first byte picks the reader; for the
// tokenizer the next two bytes (little-endian, plus one) are the vocabulary size asked
// for, 1 to 65,536 (a checkpoint names it; SentencePiece needs at least 259: 3 special
// tokens and 256 byte tokens), and a vocabulary that parses goes on into the tokenizer
// the server builds on it (ExerciseTokenizer). Any crash, sanitizer report or leak is a
// bug; errors are expected and ignored.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/fuzz/exercise_tokenizer.h"
#include "model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kHeader = 3;
  if (size < kHeader) return 0;
  // An exactly-sized heap copy (4-byte aligned by the allocator, as the readers require
  // of an mmap'd file): a read past the end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data + kHeader, data + size);
  const std::span<const uint8_t> view(bytes.data(), bytes.size());
  if (data[0] % 2 == 0) {
    (void)kvserve::model::ParseLlama2cCheckpoint(view);
    return 0;
  }
  const int vocab_size = 1 + (data[1] | (data[2] << 8));
  absl::StatusOr<kvserve::model::Vocabulary> vocab =
      kvserve::model::ParseLlama2cTokenizer(view, vocab_size);
  if (vocab.ok()) kvserve::model::fuzz::ExerciseTokenizer(*std::move(vocab));
  return 0;
}
