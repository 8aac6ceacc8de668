#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvserve::client {
namespace {

// The default random source: one Mersenne twister seeded from the OS, behind a lock.
std::function<double()> DefaultUniform() {
  struct State {
    std::mutex mu;
    std::mt19937_64 rng{std::random_device{}()};
  };
  auto state = std::make_shared<State>();
  return [state] {
    std::lock_guard<std::mutex> lock(state->mu);
    return std::uniform_real_distribution<double>(0.0, 1.0)(state->rng);
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        Options options) {
  return Connect(std::vector<std::string>{target}, std::move(options));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(std::vector<std::string> targets,
                                                        Options options) {
  if (targets.empty()) return absl::InvalidArgumentError("no target to connect to");
  if (std::set<std::string>(targets.begin(), targets.end()).size() != targets.size()) {
    return absl::InvalidArgumentError("the same target is listed twice");
  }
  if (absl::Status s = RetryPolicy::Validate(options.retry); !s.ok()) return s;
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be > 0");
  }
  std::vector<Replica> replicas;
  for (std::string& target : targets) {
    Replica r;
    r.channel = MakeChannel(target, options.credentials);
    r.stub = v1::Inference::NewStub(r.channel);
    r.target = std::move(target);
    replicas.push_back(std::move(r));
  }
  // Reachable = any replica connects within the timeout (they connect in parallel).
  const auto until = absl::ToChronoTime(absl::Now() + options.connect_timeout);
  bool reachable = false;
  for (Replica& r : replicas) r.channel->GetState(/*try_to_connect=*/true);
  for (Replica& r : replicas) {
    if (r.channel->WaitForConnected(reachable ? std::chrono::system_clock::now() : until)) {
      reachable = true;
    }
  }
  if (!reachable) {
    std::string names;
    for (const Replica& r : replicas) absl::StrAppend(&names, names.empty() ? "" : ", ", r.target);
    return absl::UnavailableError(absl::StrCat("cannot reach kvserve at ", names, " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<Client>(new Client(std::move(replicas), std::move(options)));
}

Client::Client(std::vector<Replica> replicas, Options options)
    : options_(std::move(options)),
      replicas_(std::move(replicas)),
      ring_(
          [this] {
            std::vector<std::string> names;
            for (const Replica& r : replicas_) names.push_back(r.target);
            return names;
          }(),
          options_.ring_virtual_nodes),
      retry_(options_.retry, options_.uniform != nullptr ? options_.uniform : DefaultUniform()),
      sleep_(options_.sleep != nullptr ? options_.sleep
                                       : std::function<void(absl::Duration)>(absl::SleepFor)),
      down_until_(replicas_.size(), absl::InfinitePast()) {}

std::vector<int> Client::Order(std::string_view session_id, int pinned) const {
  std::vector<int> order;
  const int n = static_cast<int>(replicas_.size());
  if (pinned >= 0) {
    order.push_back(pinned);
  } else if (!session_id.empty() && n > 1) {
    // The ring's indices are replicas_ indices: both keep the order of `targets`.
    order = ring_.Preference(session_id);
  } else {
    const int first = static_cast<int>(rotation_.fetch_add(1) % static_cast<uint64_t>(n));
    for (int i = 0; i < n; ++i) order.push_back((first + i) % n);
  }
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::stable_partition(order.begin(), order.end(), [&](int r) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return down_until_[r] <= now;
  });
  return order;
}

void Client::MarkDown(int replica) const {
  std::lock_guard<std::mutex> lock(mu_);
  down_until_[replica] = absl::Now() + options_.replica_down_time;
}

std::string Client::ReplicaFor(std::string_view session_id) const {
  if (session_id.empty()) return "";
  return replicas_[Order(session_id).front()].target;
}

absl::Status Client::RunWithRetries(std::string_view session_id, CallInfo* info, Attempt attempt,
                                    const std::function<bool()>& cancelled, int pinned) const {
  const absl::Time deadline = absl::Now() + options_.timeout;
  const std::vector<int> order = Order(session_id, pinned);
  std::vector<bool> tried(order.size(), false);
  size_t pos = 0;
  for (int n = 1;; ++n) {
    if (cancelled != nullptr && cancelled()) return absl::CancelledError("call cancelled");
    const int replica = order[pos];
    tried[pos] = true;
    AttemptOutcome outcome = attempt(replicas_[replica], deadline);
    if (info != nullptr) {
      info->replica = replicas_[replica].target;
      info->attempts = n;
      info->retry_hint = outcome.hint;
      info->retry_after = outcome.retry_after;
    }
    if (outcome.status.ok()) {
      retry_.OnSuccess();
      return outcome.status;
    }
    const bool unavailable = absl::IsUnavailable(outcome.status);
    if (unavailable) MarkDown(replica);
    std::optional<absl::Duration> delay =
        retry_.OnFailure(outcome.status, outcome.hint, n, deadline - absl::Now());
    if (!delay.has_value()) return outcome.status;
    if (unavailable) {
      // Fail over at once to the next replica in preference order not tried yet.
      size_t next = pos;
      for (size_t i = 1; i < order.size(); ++i) {
        if (!tried[(pos + i) % order.size()]) {
          next = (pos + i) % order.size();
          break;
        }
      }
      if (next != pos) {
        pos = next;
        continue;
      }
      pos = 0;  // every replica failed once: back to the preferred one, after the delay
      std::fill(tried.begin(), tried.end(), false);
    }
    sleep_(*delay);
  }
}

template <typename Request, typename Response>
absl::StatusOr<Response> Client::CallUnary(
    grpc::Status (v1::Inference::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, std::string_view session_id, CallInfo* info, int pinned) const {
  Response response;
  absl::Status status = RunWithRetries(
      session_id, info,
      [&](const Replica& replica, absl::Time deadline) -> AttemptOutcome {
        grpc::ClientContext context;
        PrepareContext(&context, deadline, options_.bearer_token, session_id);
        response.Clear();
        absl::Status s =
            FromGrpcStatus((replica.stub.get()->*method)(&context, request, &response));
        if (s.ok()) return {s, std::nullopt};
        return {s, RetryHint(context), HasRetryAfter(context)};
      },
      nullptr, pinned);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request,
                                                      CallInfo* info) const {
  return CallUnary(&v1::Inference::Stub::Generate, request, request.session_id(), info);
}

std::unique_ptr<GenerateStream> Client::StartGenerateStream(
    const v1::GenerateRequest& request) const {
  return std::unique_ptr<GenerateStream>(new GenerateStream(this, request));
}

absl::Status Client::StreamGenerate(
    const v1::GenerateRequest& request,
    const std::function<void(const v1::GenerateStreamResponse&)>& on_message,
    CallInfo* info) const {
  std::unique_ptr<GenerateStream> stream = StartGenerateStream(request);
  v1::GenerateStreamResponse message;
  while (stream->Next(&message)) on_message(message);
  absl::Status status = stream->Finish();
  if (info != nullptr) *info = stream->info();
  return status;
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(const std::string& text, bool add_bos) const {
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_bos(add_bos);
  absl::StatusOr<v1::TokenizeResponse> response =
      CallUnary(&v1::Inference::Stub::Tokenize, request, "");
  if (!response.ok()) return response.status();
  return std::vector<int32_t>(response->token_ids().begin(), response->token_ids().end());
}

absl::StatusOr<std::string> Client::Detokenize(const std::vector<int32_t>& ids) const {
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  absl::StatusOr<v1::DetokenizeResponse> response =
      CallUnary(&v1::Inference::Stub::Detokenize, request, "");
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_text());
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo() const {
  return CallUnary(&v1::Inference::Stub::GetModelInfo, v1::GetModelInfoRequest(), "");
}

namespace {
void SetTtl(absl::Duration ttl, google::protobuf::Duration* out) {
  const int64_t nanos = absl::ToInt64Nanoseconds(ttl);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}
}  // namespace

absl::StatusOr<v1::Session> Client::OpenSession(absl::Duration ttl, CallInfo* call_info) const {
  v1::OpenSessionRequest request;
  SetTtl(ttl, request.mutable_ttl());
  const int tries = replicas_.size() == 1 ? 1 : 4 * static_cast<int>(replicas_.size());
  for (int i = 1;; ++i) {
    CallInfo info;
    absl::StatusOr<v1::Session> session =
        CallUnary(&v1::Inference::Stub::OpenSession, request, "", &info);
    if (!session.ok() || i == tries || ReplicaFor(session->session_id()) == info.replica) {
      if (call_info != nullptr) *call_info = std::move(info);
      return session;
    }
    // Opened away from its owner (see the header comment): close it where it is.
    const int opener =
        static_cast<int>(std::find_if(replicas_.begin(), replicas_.end(),
                                      [&](const Replica& r) { return r.target == info.replica; }) -
                         replicas_.begin());
    v1::CloseSessionRequest close;
    close.set_session_id(session->session_id());
    CallUnary(&v1::Inference::Stub::CloseSession, close, session->session_id(), nullptr, opener)
        .status()
        .IgnoreError();
  }
}

absl::StatusOr<v1::Session> Client::ForkSession(const std::string& parent_id,
                                                absl::Duration ttl) const {
  v1::ForkSessionRequest request;
  request.set_parent_session_id(parent_id);
  if (ttl != absl::ZeroDuration()) SetTtl(ttl, request.mutable_ttl());
  return CallUnary(&v1::Inference::Stub::ForkSession, request, parent_id);
}

absl::Status Client::CloseSession(const std::string& id, CallInfo* info) const {
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  return CallUnary(&v1::Inference::Stub::CloseSession, request, id, info).status();
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& id) const {
  v1::GetSessionRequest request;
  request.set_session_id(id);
  return CallUnary(&v1::Inference::Stub::GetSession, request, id);
}

}  // namespace kvserve::client
