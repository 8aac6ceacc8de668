// libFuzzer target: GenerateRequest bytes from the network through what kvserve does with
// them before any work: protobuf parsing, the service's conversion and wire limits
// (ToEngineRequest, with a synthetic tokenizer for text prompts and a ChatML template for
// messages), the engine's field checks (engine::ValidateRequest) and the renaming of a
// field error to its proto path.
// Any crash, sanitizer report or leak is a bug; rejections are expected. An accepted
// request must satisfy what the engine relies on (ids in range, max_tokens in range).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/time/time.h"
#include "engine/request_validation.h"
#include "kvserve/v1/inference.pb.h"
#include "model/chat_prompter.h"
#include "model/testing/synthetic_vocabulary.h"
#include "service/request_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A ChatML template, so that prompt.messages are rendered and encoded too.
  static const kvserve::model::Tokenizer* const tokenizer =
      kvserve::model::MakeSyntheticChatTokenizer("{{ '<|im_start|>' + message['role'] }}")
          .release();
  static const kvserve::model::ChatPrompter* const chat =
      new kvserve::model::ChatPrompter(*tokenizer);
  kvserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  kvserve::service::RequestLimits limits;
  limits.max_prompt_bytes = 4096;  // keeps each run short; the default is larger
  absl::StatusOr<kvserve::engine::Request> converted =
      kvserve::service::ToEngineRequest(request, limits, *tokenizer, absl::InfiniteFuture(), chat);
  if (!converted.ok()) return 0;
  const kvserve::engine::RequestRules rules{.vocab_size = tokenizer->vocab().size(),
                                            .max_tokens_limit = 4096,
                                            .max_cache_salt_bytes = 256,
                                            .stop_limits = {},
                                            .has_tokenizer = true};
  const absl::Status valid = kvserve::engine::ValidateRequest(*converted, rules);
  if (!valid.ok()) {
    (void)kvserve::service::WithProtoFieldNames(valid);
    return 0;
  }
  for (const std::vector<int32_t>* ids : {&converted->prompt_tokens, &converted->turn_separator}) {
    for (int32_t t : *ids) {
      if (t < 0 || t >= rules.vocab_size) std::abort();
    }
  }
  if (converted->turn_end_token < -1 || converted->turn_end_token >= rules.vocab_size) {
    std::abort();
  }
  if (converted->sampling.max_tokens < 1 || converted->sampling.max_tokens > 4096) std::abort();
  return 0;
}
