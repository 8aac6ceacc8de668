// kvserve-cli chat: a conversation in one session, a turn per input line.
#include <cstdio>
#include <istream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_commands.h"

namespace kvserve::client::cli {
namespace {

constexpr char kHelp[] =
    "type a turn per line; commands: /fork (continue in a fork of this session), "
    "/reset (close it and start a new one), /close (close it and end), /help\n";

// Streams one turn to stdout; prints its usage line with the client's time to first
// token (send to the first message with tokens) on stderr.
absl::Status RunTurn(const Client& client, v1::GenerateRequest request) {
  const absl::Time sent = absl::Now();
  absl::Duration client_ttft = absl::ZeroDuration();
  v1::GenerateStreamResponse last;
  CallInfo info;
  absl::Status status = client.StreamGenerate(
      request,
      [&](const v1::GenerateStreamResponse& m) {
        if (client_ttft == absl::ZeroDuration() && m.token_ids_size() > 0) {
          client_ttft = absl::Now() - sent;
        }
        std::printf("%s", m.text().c_str());
        std::fflush(stdout);
        last = m;
      },
      &info);
  std::printf("\n");
  std::fflush(stdout);
  if (!status.ok()) return status;
  PrintUsage(stderr, last.usage(), last.finish_reason());
  std::fprintf(stderr, "  client ttft %.1f ms, replica %s\n",
               absl::ToDoubleMilliseconds(client_ttft), info.replica.c_str());
  return absl::OkStatus();
}

// Puts one chat line into `request`: as a user message (after `system`, when non-empty,
// on the first turn of a conversation) when the model has a chat template, else as text.
void SetTurnPrompt(const std::string& line, bool use_messages, bool first_turn,
                   const std::string& system, v1::GenerateRequest& request) {
  if (!use_messages) {
    request.set_text(line);
    return;
  }
  v1::Conversation* conversation = request.mutable_messages();  // clears any text
  if (first_turn && !system.empty()) {
    v1::Message* m = conversation->add_messages();
    m->set_role("system");
    m->set_content(system);
  }
  v1::Message* m = conversation->add_messages();
  m->set_role("user");
  m->set_content(line);
}

}  // namespace

int RunChat(const Client& client, const v1::GenerateRequest& turn, absl::Duration ttl,
            const std::string& system, std::istream& in) {
  absl::StatusOr<v1::ModelInfo> model = client.GetModelInfo();
  if (!model.ok()) return Fail(model.status());
  const bool use_messages = !model->chat_template().empty();
  absl::StatusOr<v1::Session> session = client.OpenSession(ttl);
  if (!session.ok()) return Fail(session.status());
  std::string id = session->session_id();
  std::fprintf(stderr, "session %s (%s); %s", id.c_str(),
               use_messages ? absl::StrCat(model->chat_template(), " chat template").c_str()
                            : "no chat template: lines are sent as text",
               kHelp);
  std::string line;
  bool first_turn = true;
  int exit_code = 0;
  while (std::getline(in, line)) {
    if (line == "/help") {
      std::fprintf(stderr, "%s", kHelp);
      continue;
    }
    if (line == "/close") break;
    if (line == "/fork" || line == "/reset") {
      absl::StatusOr<v1::Session> next =
          line == "/fork" ? client.ForkSession(id, ttl) : client.OpenSession(ttl);
      if (!next.ok()) {
        exit_code = Fail(next.status());
        continue;
      }
      if (line == "/reset") {
        if (absl::Status closed = client.CloseSession(id); !closed.ok()) Fail(closed);
        first_turn = true;
      }
      std::fprintf(stderr, "session %s (%s %s)\n", next->session_id().c_str(),
                   line == "/fork" ? "fork of" : "new; closed", id.c_str());
      id = next->session_id();
      continue;
    }
    if (absl::StartsWith(line, "/")) {
      std::fprintf(stderr, "unknown command %s; %s", line.c_str(), kHelp);
      continue;
    }
    v1::GenerateRequest request = turn;
    SetTurnPrompt(line, use_messages, first_turn, system, request);
    request.set_session_id(id);
    if (absl::Status status = RunTurn(client, request); !status.ok()) {
      exit_code = Fail(status);
      continue;
    }
    first_turn = false;
  }
  absl::Status closed = client.CloseSession(id);
  if (!closed.ok()) return Fail(closed);
  std::fprintf(stderr, "closed session %s\n", id.c_str());
  return exit_code;
}

}  // namespace kvserve::client::cli
