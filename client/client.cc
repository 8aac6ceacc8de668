#include "client/client.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvserve::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())),
                      status.error_message());
}

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// A blocking unary call on `stub` with the client's per-call `timeout`; a failed call
// becomes its absl::Status.
template <typename Request, typename Response>
absl::StatusOr<Response> CallUnary(v1::Inference::Stub& stub, absl::Duration timeout,
                                   grpc::Status (v1::Inference::Stub::*method)(grpc::ClientContext*,
                                                                               const Request&,
                                                                               Response*),
                                   const Request& request) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  Response response;
  grpc::Status status = (stub.*method)(&ctx, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        Options options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach kvserve at ", target, " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, Options options)
    : channel_(std::move(channel)), stub_(v1::Inference::NewStub(channel_)), options_(options) {}

absl::StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request) const {
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::Generate, request);
}

absl::Status Client::GenerateStream(
    const v1::GenerateRequest& request,
    const std::function<void(const v1::GenerateStreamResponse&)>& on_message) const {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
      stub_->GenerateStream(&ctx, request);
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) on_message(message);
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(const std::string& text, bool add_bos) const {
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_bos(add_bos);
  absl::StatusOr<v1::TokenizeResponse> response =
      CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::Tokenize, request);
  if (!response.ok()) return response.status();
  return std::vector<int32_t>(response->token_ids().begin(), response->token_ids().end());
}

absl::StatusOr<std::string> Client::Detokenize(const std::vector<int32_t>& ids) const {
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  absl::StatusOr<v1::DetokenizeResponse> response =
      CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::Detokenize, request);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_text());
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo() const {
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::GetModelInfo,
                   v1::GetModelInfoRequest());
}

absl::StatusOr<v1::Session> Client::OpenSession(absl::Duration ttl) const {
  v1::OpenSessionRequest request;
  const int64_t nanos = absl::ToInt64Nanoseconds(ttl);
  request.mutable_ttl()->set_seconds(nanos / 1000000000);
  request.mutable_ttl()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::OpenSession, request);
}

absl::StatusOr<v1::Session> Client::ForkSession(const std::string& parent_id) const {
  v1::ForkSessionRequest request;
  request.set_parent_session_id(parent_id);
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::ForkSession, request);
}

absl::Status Client::CloseSession(const std::string& id) const {
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::CloseSession, request).status();
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& id) const {
  v1::GetSessionRequest request;
  request.set_session_id(id);
  return CallUnary(*stub_, options_.timeout, &v1::Inference::Stub::GetSession, request);
}

}  // namespace kvserve::client
