// libFuzzer target: arbitrary bytes through the GGUF container parser and the llama
// mapping (config, vocabulary, weights, Model::FromParts), then, as the server does with a
// model it attaches, the tokenizer built on the file's vocabulary, which encodes and
// decodes a short text. Any crash, sanitizer report or leak is a bug; errors are expected
// and ignored.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy: aligned like an mmap'd file, and any read past the
  // end hits AddressSanitizer's redzone.
  std::vector<uint8_t> bytes(data, data + size);
  absl::StatusOr<kvserve::model::GgufFile> file =
      kvserve::model::ParseGguf(std::span<const uint8_t>(bytes.data(), bytes.size()));
  if (!file.ok()) return 0;
  absl::StatusOr<std::unique_ptr<kvserve::model::Model>> model =
      kvserve::model::ModelFromGguf(*file, nullptr);
  if (!model.ok()) return 0;
  absl::StatusOr<std::unique_ptr<kvserve::model::Tokenizer>> tokenizer =
      kvserve::model::Tokenizer::Create((*model)->vocab());
  if (!tokenizer.ok()) return 0;
  const std::vector<int32_t> ids =
      (*tokenizer)->Encode("Once upon a time, <s> 12 caf\xc3\xa9s\n", /*add_bos=*/true);
  (void)(*tokenizer)->Decode(ids);
  return 0;
}
