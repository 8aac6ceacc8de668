// kvserve-cli's flags (all defined in cli_flags.cc, the file --help lists) and their
// mapping onto the client's and the commands' options (client/cli_commands.h). Only
// cli_main.cc includes it.
#ifndef KVSERVE_CLIENT_CLI_FLAGS_H_
#define KVSERVE_CLIENT_CLI_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cli_commands.h"
#include "client/client.h"
#include "kvserve/v1/inference.pb.h"

// The flags one command reads as they are.
ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(std::string, system);
ABSL_DECLARE_FLAG(bool, add_bos);
ABSL_DECLARE_FLAG(absl::Duration, ttl);

namespace kvserve::client::cli {

// --target split at commas.
std::vector<std::string> TargetsFromFlags();

// --timeout, --connect-timeout, --max-attempts, TLS and the bearer token (read from
// --token-file). INVALID_ARGUMENT naming the flag when a file cannot be read.
absl::StatusOr<Client::Options> ClientOptionsFromFlags();

// Sampling and limits (--max-tokens, --temperature, --top-k, --top-p, --seed,
// --ignore-eos); no prompt.
v1::GenerateRequest RequestFromFlags();

// bench's flags; the HTTP side's bearer token and deadlines are `client`'s, its TLS files
// the --tls-* flags.
// INVALID_ARGUMENT naming the flag for a bad --http-endpoint.
absl::StatusOr<BenchOptions> BenchOptionsFromFlags(const Client::Options& client);

}  // namespace kvserve::client::cli

#endif  // KVSERVE_CLIENT_CLI_FLAGS_H_
