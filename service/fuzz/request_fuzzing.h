// Shared by the service's request fuzzers: a synthetic chat tokenizer, the engine's field
// checks on a converted request, and what an accepted one must satisfy before the engine
// runs it.
#ifndef KVSERVE_SERVICE_FUZZ_REQUEST_FUZZING_H_
#define KVSERVE_SERVICE_FUZZ_REQUEST_FUZZING_H_

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "engine/request_validation.h"
#include "model/chat_prompter.h"
#include "model/testing/synthetic_vocabulary.h"

namespace kvserve::service::fuzz {

// A synthetic tokenizer with a ChatML template (so that messages are rendered and encoded
// too) and its chat prompter; made once, never freed (as libFuzzer targets keep state).
struct SyntheticChat {
  const model::Tokenizer* tokenizer;
  const model::ChatPrompter* chat;
};
inline SyntheticChat GetSyntheticChat() {
  static const model::Tokenizer* const tokenizer =
      model::MakeSyntheticChatTokenizer("{{ '<|im_start|>' + message['role'] }}").release();
  static const model::ChatPrompter* const chat = new model::ChatPrompter(*tokenizer);
  return {tokenizer, chat};
}

// The largest max_tokens the fuzzers allow (the engine's default limit).
inline constexpr int32_t kMaxTokensLimit = 4096;

// engine::ValidateRequest of `request` for a vocabulary of `vocab_size` tokens; returns its
// status (a FieldError for a rejection). When it accepts, aborts (a fuzzer finding) unless
// every prompt and separator id is in [0, vocab_size), turn_end_token in [-1, vocab_size)
// and max_tokens in [1, kMaxTokensLimit].
inline absl::Status ValidateOrAbort(const engine::Request& request, int32_t vocab_size) {
  const engine::RequestRules rules{.vocab_size = vocab_size,
                                   .max_tokens_limit = kMaxTokensLimit,
                                   .max_cache_salt_bytes = 256,
                                   .stop_limits = {},
                                   .has_tokenizer = true};
  absl::Status valid = engine::ValidateRequest(request, rules);
  if (!valid.ok()) return valid;
  for (const std::vector<int32_t>* ids : {&request.prompt_tokens, &request.turn_separator}) {
    for (int32_t t : *ids) {
      if (t < 0 || t >= vocab_size) std::abort();
    }
  }
  if (request.turn_end_token < -1 || request.turn_end_token >= vocab_size) std::abort();
  if (request.sampling.max_tokens < 1 || request.sampling.max_tokens > kMaxTokensLimit) {
    std::abort();
  }
  return valid;
}

}  // namespace kvserve::service::fuzz

#endif  // KVSERVE_SERVICE_FUZZ_REQUEST_FUZZING_H_
