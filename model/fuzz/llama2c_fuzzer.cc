// libFuzzer target: arbitrary bytes through the llama2.c checkpoint and tokenizer.bin
// readers (both read untrusted files). The first byte picks the reader; for the
// tokenizer the second byte is the vocabulary size asked for. Any crash, sanitizer report
// or leak is a bug; errors are expected and ignored.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // An exactly-sized heap copy (4-byte aligned by the allocator, as the readers require
  // of an mmap'd file): a read past the end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data + 2, data + size);
  const std::span<const uint8_t> view(bytes.data(), bytes.size());
  if (data[0] % 2 == 0) {
    (void)kvserve::model::ParseLlama2cCheckpoint(view);
  } else {
    (void)kvserve::model::ParseLlama2cTokenizer(view, 1 + data[1]);
  }
  return 0;
}
