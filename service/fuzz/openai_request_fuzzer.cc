// libFuzzer target: OpenAI API request bodies from the network through what kvserve does
// with them before any work: the JSON reader (ParseOpenAiRequest: nesting bound, syntax,
// types, ranges; the first input byte picks chat or completions), the service's
// conversion and wire limits of the resulting GenerateRequest (ToEngineRequest, with a
// synthetic tokenizer and a ChatML template), the engine's field checks
// (engine::ValidateRequest), and every error's HTTP form (ToHttpError).
// Any crash, sanitizer report or leak is a bug; rejections are expected. An accepted
// request must satisfy what the HTTP front relies on (n in [1, max_n]) and what the
// engine relies on (ids in range, max_tokens in range); an error must be a 4xx whose
// body is a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "service/fuzz/request_fuzzing.h"
#include "service/openai_request.h"
#include "service/openai_response.h"
#include "service/request_convert.h"

namespace {

using kvserve::service::ApiKind;

// A rejection must be a client error with an {"error": ...} body.
void CheckRejection(const absl::Status& status, ApiKind kind) {
  const kvserve::service::HttpError error = kvserve::service::ToHttpError(status, kind);
  if (error.status < 400 || error.status >= 500) std::abort();
  if (error.body.rfind("{\"error\":", 0) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [tokenizer, chat] = kvserve::service::fuzz::GetSyntheticChat();
  if (size == 0) return 0;
  const ApiKind kind = (data[0] & 1) != 0 ? ApiKind::kCompletions : ApiKind::kChatCompletions;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const kvserve::service::OpenAiLimits limits;
  absl::StatusOr<kvserve::service::OpenAiRequest> parsed =
      kvserve::service::ParseOpenAiRequest(kind, body, limits);
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    CheckRejection(parsed.status(), kind);
    return 0;
  }
  if (parsed->kind != kind || parsed->n < 1 || parsed->n > limits.max_n) std::abort();

  kvserve::service::RequestLimits request_limits;
  request_limits.max_prompt_bytes = 4096;  // keeps each run short; the default is larger
  absl::StatusOr<kvserve::engine::Request> converted = kvserve::service::ToEngineRequest(
      parsed->generate, request_limits, *tokenizer, absl::InfiniteFuture(), chat);
  if (!converted.ok()) {
    CheckRejection(kvserve::service::WithProtoFieldNames(converted.status()), kind);
    return 0;
  }
  const absl::Status valid =
      kvserve::service::fuzz::ValidateOrAbort(*converted, tokenizer->vocab().size());
  if (!valid.ok()) CheckRejection(kvserve::service::WithProtoFieldNames(valid), kind);
  return 0;
}
