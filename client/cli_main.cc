// kvserve-cli: talk to kvserve. This file only maps the flags (client/cli_flags.h) onto
// the commands (client/cli_commands.h); every command lives in its own file.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "client/cli_commands.h"
#include "client/cli_flags.h"
#include "client/client.h"
#include "common/flags.h"

namespace kvserve::client::cli {
namespace {

constexpr char kUsage[] =
    "talk to a kvserve server.\n"
    "  kvserve-cli generate --prompt TEXT [--stream] [--max-tokens N] [--temperature T]\n"
    "  kvserve-cli chat            a session; each stdin line is a turn (/fork /reset /close "
    "/help)\n"
    "  kvserve-cli tokenize --prompt TEXT [--add-bos]\n"
    "  kvserve-cli sessions open | get ID | fork ID | close ID   [--ttl D]\n"
    "  kvserve-cli info            the model and the server's limits\n"
    "  kvserve-cli bench [--concurrency N] [--requests M | --duration D] [--request-rate R]\n"
    "                    [--shape single|conversation --turns T] [--prompts-file F] [--json]\n"
    "                    [--as-messages] [--protocol grpc|http --http-target HOST:PORT\n"
    "                    --http-endpoint chat|completions]\n"
    "                    (SIGINT/SIGTERM end the run early; the report is printed)\n"
    "Common: --target HOST:PORT[,HOST:PORT...] (default 127.0.0.1:50051), --token-file FILE,\n"
    "--tls-ca FILE [--tls-cert FILE --tls-key FILE], --timeout D, --max-attempts N.\n"
    "Flags accept - or _.";

int Run(const std::vector<std::string>& args) {
  const std::string command = args[1];
  const std::vector<std::string> rest(args.begin() + 2, args.end());
  static const char* const kCommands[] = {"generate", "chat", "tokenize",
                                          "sessions", "info", "bench"};
  if (std::find(std::begin(kCommands), std::end(kCommands), command) == std::end(kCommands)) {
    std::fprintf(stderr, "kvserve-cli: unknown command \"%s\"\n%s\n", command.c_str(), kUsage);
    return 2;
  }
  if (command != "sessions" && !rest.empty()) {
    std::fprintf(stderr, "kvserve-cli: %s takes no arguments (got \"%s\")\n", command.c_str(),
                 rest[0].c_str());
    return 2;
  }
  // Before any gRPC object (credentials too): gRPC's threads must not take the signals.
  std::optional<StopSignals> stop;
  if (command == "bench") stop.emplace();
  absl::StatusOr<Client::Options> options = ClientOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "kvserve-cli: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<BenchOptions> bench = BenchOptionsFromFlags(*options);
  if (!bench.ok()) {
    std::fprintf(stderr, "kvserve-cli: %s\n", std::string(bench.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(TargetsFromFlags(), *std::move(options));
  if (!client.ok()) return Fail(client.status());
  const Client& c = **client;
  if (command == "generate") {
    v1::GenerateRequest request = RequestFromFlags();
    request.set_text(absl::GetFlag(FLAGS_prompt));
    return RunGenerate(c, request, absl::GetFlag(FLAGS_stream));
  }
  if (command == "chat") {
    return RunChat(c, RequestFromFlags(), absl::GetFlag(FLAGS_ttl), absl::GetFlag(FLAGS_system),
                   std::cin);
  }
  if (command == "tokenize") {
    return RunTokenize(c, absl::GetFlag(FLAGS_prompt), absl::GetFlag(FLAGS_add_bos));
  }
  if (command == "sessions") return RunSessions(c, rest, absl::GetFlag(FLAGS_ttl));
  if (command == "info") return RunInfo(c);
  return RunBench(c, *bench, &*stop);
}

}  // namespace
}  // namespace kvserve::client::cli

int main(int argc, char** argv) {
  const std::vector<std::string> args =
      kvserve::common::ParseFlags(argc, argv, kvserve::client::cli::kUsage, "client/cli_flags.cc");
  if (args.size() < 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  return kvserve::client::cli::Run(args);
}
