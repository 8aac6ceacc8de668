// kvserve-cli's single-call commands: generate, tokenize, info, sessions.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli_commands.h"
#include "google/protobuf/text_format.h"

namespace kvserve::client::cli {
namespace {

double Ms(const google::protobuf::Duration& d) { return (d.seconds() + d.nanos() * 1e-9) * 1e3; }

void PrintSession(const v1::Session& s) {
  const absl::Time expire =
      absl::FromUnixSeconds(s.expire_time().seconds()) + absl::Nanoseconds(s.expire_time().nanos());
  std::printf("%s history_tokens=%d expire_time=%s busy=%s\n", s.session_id().c_str(),
              s.history_tokens(),
              absl::FormatTime(absl::RFC3339_sec, expire, absl::UTCTimeZone()).c_str(),
              s.busy() ? "true" : "false");
}

}  // namespace

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvserve-cli: %s\n", status.ToString().c_str());
  return 1;
}

void PrintUsage(std::FILE* out, const v1::Usage& u, v1::FinishReason reason) {
  std::fprintf(out,
               "[%s] prompt %d (cached local %d, remote %d, computed %d), completion %d; "
               "queue %.1f ms, ttft %.1f ms, total %.1f ms\n",
               v1::FinishReason_Name(reason).c_str(), u.prompt_tokens(), u.cached_tokens_local(),
               u.cached_tokens_remote(), u.computed_tokens(), u.completion_tokens(),
               Ms(u.queue_time()), Ms(u.time_to_first_token()), Ms(u.total_time()));
}

int RunGenerate(const Client& client, const v1::GenerateRequest& request, bool stream) {
  if (!stream) {
    absl::StatusOr<v1::GenerateResponse> response = client.Generate(request);
    if (!response.ok()) return Fail(response.status());
    std::printf("%s%s\n", request.text().c_str(), response->text().c_str());
    PrintUsage(stderr, response->usage(), response->finish_reason());
    return 0;
  }
  std::printf("%s", request.text().c_str());
  v1::GenerateStreamResponse last;
  absl::Status status = client.StreamGenerate(request, [&](const v1::GenerateStreamResponse& m) {
    std::printf("%s", m.text().c_str());
    std::fflush(stdout);
    last = m;
  });
  std::printf("\n");
  if (!status.ok()) return Fail(status);
  PrintUsage(stderr, last.usage(), last.finish_reason());
  return 0;
}

int RunTokenize(const Client& client, const std::string& text, bool add_bos) {
  absl::StatusOr<std::vector<int32_t>> ids = client.Tokenize(text, add_bos);
  if (!ids.ok()) return Fail(ids.status());
  std::printf("%s\n", absl::StrJoin(*ids, " ").c_str());
  std::fprintf(stderr, "%zu tokens\n", ids->size());
  return 0;
}

int RunInfo(const Client& client) {
  absl::StatusOr<v1::ModelInfo> info = client.GetModelInfo();
  if (!info.ok()) return Fail(info.status());
  const auto* descriptor = info->GetDescriptor();
  const auto* reflection = info->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    std::string value;
    if (field->is_repeated()) continue;  // (ModelInfo has none; a new one is skipped)
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
      value = reflection->GetString(*info, field);
    } else {  // any scalar: int32, int64 (kv_bytes_per_token), bool, ...
      google::protobuf::TextFormat::PrintFieldValueToString(*info, field, -1, &value);
    }
    std::printf("%s: %s\n", field->name().c_str(), value.c_str());
  }
  return 0;
}

int RunSessions(const Client& client, const std::vector<std::string>& args, absl::Duration ttl) {
  const std::string verb = args.empty() ? "" : args[0];
  if (verb == "open" && args.size() == 1) {
    absl::StatusOr<v1::Session> s = client.OpenSession(ttl);
    if (!s.ok()) return Fail(s.status());
    PrintSession(*s);
    return 0;
  }
  if (args.size() != 2 || (verb != "get" && verb != "fork" && verb != "close")) {
    std::fprintf(stderr, "kvserve-cli: sessions open | get ID | fork ID | close ID\n");
    return 2;
  }
  const std::string& id = args[1];
  if (verb == "close") {
    absl::Status closed = client.CloseSession(id);
    if (!closed.ok()) return Fail(closed);
    std::printf("closed %s\n", id.c_str());
    return 0;
  }
  absl::StatusOr<v1::Session> s =
      verb == "get" ? client.GetSession(id) : client.ForkSession(id, ttl);
  if (!s.ok()) return Fail(s.status());
  PrintSession(*s);
  return 0;
}

}  // namespace kvserve::client::cli
