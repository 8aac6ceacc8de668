// libFuzzer target: arbitrary bytes through the GGUF container parser and the llama
// mapping (config, vocabulary, weights, Model::FromParts). Any crash, sanitizer
// report or leak is a bug; errors are expected and ignored.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy: aligned like an mmap'd file, and any read past the
  // end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data, data + size);
  absl::StatusOr<kvserve::model::GgufFile> file =
      kvserve::model::ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
  if (!file.ok()) return 0;
  (void)kvserve::model::ModelFromGguf(*file, nullptr);
  return 0;
}
