// kvserve's flags (server_flags.cc; with the shared server/tls_flags and server/auth_flags)
// and how they map onto its options. Linked into kvserve only.
#ifndef KVSERVE_SERVICE_SERVER_FLAGS_H_
#define KVSERVE_SERVICE_SERVER_FLAGS_H_

#include "absl/status/statusor.h"
#include "service/server_run.h"

namespace kvserve::service {

// The options the parsed flags say, checked (ValidateProcessOptions). Reads the files the
// flags name (--auth-tokens, --tls-*, --metrics-tls-*). INVALID_ARGUMENT whose message
// starts with the flag's name (without "--": common::RunFlagsOnlyMain adds it).
absl::StatusOr<ProcessOptions> ProcessOptionsFromFlags();

// --blas-reexec and --backend, which main() needs before the options (the OpenBLAS core is
// chosen, and the process may re-execute, before anything else runs).
bool BlasReexecFromFlag();
std::string BackendFromFlag();

}  // namespace kvserve::service

#endif  // KVSERVE_SERVICE_SERVER_FLAGS_H_
