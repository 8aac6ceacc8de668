#include "service/grpc_status.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvserve::service {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numeric values (0..16).
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      std::string(status.message()));
}

std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::AsciiStrToLower(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(static_cast<int>(code))));
}

void AddRetryHint(grpc::ServerContextBase* context, absl::Duration retry_after) {
  const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(retry_after));
  const int64_t seconds = std::max<int64_t>(1, (ms + 999) / 1000);
  context->AddTrailingMetadata("grpc-retry-pushback-ms", absl::StrCat(ms));
  context->AddTrailingMetadata("retry-after", absl::StrCat(seconds));
}

bool WantsRetryHint(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kAborted;  // a session turn running elsewhere
}

}  // namespace kvserve::service
