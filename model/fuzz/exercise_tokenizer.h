// Shared by the model-file fuzz targets: builds the tokenizer of a vocabulary read from an
// untrusted file, as the server builds it for a model it attaches (Tokenizer::Create:
// pieces, merges, pre-tokenizer, special tokens), then encodes a short text that touches
// spaces, digits, a special token, multi-byte UTF-8 and newlines, and decodes the ids.
// An invalid vocabulary is an expected error and ends the call.
#ifndef KVSERVE_MODEL_FUZZ_EXERCISE_TOKENIZER_H_
#define KVSERVE_MODEL_FUZZ_EXERCISE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"
#include "model/vocabulary.h"

namespace kvserve::model::fuzz {

inline void ExerciseTokenizer(Vocabulary vocab) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(vocab));
  if (!tokenizer.ok()) return;
  const std::vector<int32_t> ids =
      (*tokenizer)
          ->Encode("Once upon a time, <s> 123 caf\xc3\xa9s\n\n  \xe4\xb8\x96", /*add_bos=*/true,
                   /*parse_special=*/true);
  (void)(*tokenizer)->Decode(ids);
}

}  // namespace kvserve::model::fuzz

#endif  // KVSERVE_MODEL_FUZZ_EXERCISE_TOKENIZER_H_
