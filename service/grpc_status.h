// The one place where absl::Status becomes grpc::Status.
#ifndef KVSERVE_SERVICE_GRPC_STATUS_H_
#define KVSERVE_SERVICE_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace kvserve::service {

// Maps the code one to one (absl codes are gRPC codes) and keeps the message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The lowercase-with-underscores name of a gRPC code ("resource_exhausted"), used as
// a metric label.
std::string GrpcCodeName(grpc::StatusCode code);

// Adds the retry hint an overloaded or draining server gives a client: trailing
// metadata "grpc-retry-pushback-ms" (understood by gRPC's retry policy) and
// "retry-after" (whole seconds, at least 1, as HTTP's header). Call before Finish.
void AddRetryHint(grpc::ServerContextBase* context, absl::Duration retry_after);

// True for the codes that carry a retry hint: RESOURCE_EXHAUSTED, UNAVAILABLE and ABORTED
// (a session turn refused while another turn of the session runs).
bool WantsRetryHint(const absl::Status& status);

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_GRPC_STATUS_H_
