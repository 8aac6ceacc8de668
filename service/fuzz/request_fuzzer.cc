// libFuzzer target: GenerateRequest bytes from the network through what kvserve does with
// them before any work: protobuf parsing, the service's conversion and wire limits
// (ToEngineRequest, with a synthetic tokenizer for text prompts and a ChatML template for
// messages), the engine's field checks (engine::ValidateRequest) and the renaming of a
// field error to its proto path.
// Any crash, sanitizer report or leak is a bug; rejections are expected. An accepted
// request must satisfy what the engine relies on (ids in range, max_tokens in range).
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "kvserve/v1/inference.pb.h"
#include "service/fuzz/request_fuzzing.h"
#include "service/request_convert.h"

// Protobuf logs every string field of invalid UTF-8 it refuses to parse: millions of lines
// in a long run, which slow the fuzzer down and bury its own report. Those refusals are
// expected; the handler drops them (FATAL messages still abort).
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [tokenizer, chat] = kvserve::service::fuzz::GetSyntheticChat();
  kvserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  kvserve::service::RequestLimits limits;
  limits.max_prompt_bytes = 4096;  // keeps each run short; the default is larger
  absl::StatusOr<kvserve::engine::Request> converted =
      kvserve::service::ToEngineRequest(request, limits, *tokenizer, absl::InfiniteFuture(), chat);
  if (!converted.ok()) return 0;
  const absl::Status valid =
      kvserve::service::fuzz::ValidateOrAbort(*converted, tokenizer->vocab().size());
  if (!valid.ok()) (void)kvserve::service::WithProtoFieldNames(valid);
  return 0;
}
