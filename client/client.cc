#include "client/client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())),
                      status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        Options options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach kvserve at ", target, " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, Options options)
    : channel_(std::move(channel)), stub_(v1::Inference::NewStub(channel_)), options_(options) {}

void Client::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
}

absl::StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GenerateResponse response;
  grpc::Status status = stub_->Generate(&ctx, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status Client::GenerateStream(
    const v1::GenerateRequest& request,
    const std::function<void(const v1::GenerateStreamResponse&)>& on_message) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
      stub_->GenerateStream(&ctx, request);
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) on_message(message);
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(const std::string& text, bool add_bos) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_bos(add_bos);
  v1::TokenizeResponse response;
  grpc::Status status = stub_->Tokenize(&ctx, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end());
}

absl::StatusOr<std::string> Client::Detokenize(const std::vector<int32_t>& ids) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  v1::DetokenizeResponse response;
  grpc::Status status = stub_->Detokenize(&ctx, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.text();
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo() const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ModelInfo info;
  grpc::Status status = stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return FromGrpcStatus(status);
  return info;
}

absl::StatusOr<v1::Session> Client::OpenSession(absl::Duration ttl) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::OpenSessionRequest request;
  const int64_t nanos = absl::ToInt64Nanoseconds(ttl);
  request.mutable_ttl()->set_seconds(nanos / 1000000000);
  request.mutable_ttl()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
  v1::Session session;
  grpc::Status status = stub_->OpenSession(&ctx, request, &session);
  if (!status.ok()) return FromGrpcStatus(status);
  return session;
}

absl::StatusOr<v1::Session> Client::ForkSession(const std::string& parent_id) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ForkSessionRequest request;
  request.set_parent_session_id(parent_id);
  v1::Session session;
  grpc::Status status = stub_->ForkSession(&ctx, request, &session);
  if (!status.ok()) return FromGrpcStatus(status);
  return session;
}

absl::Status Client::CloseSession(const std::string& id) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  v1::CloseSessionResponse response;
  return FromGrpcStatus(stub_->CloseSession(&ctx, request, &response));
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& id) const {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetSessionRequest request;
  request.set_session_id(id);
  v1::Session session;
  grpc::Status status = stub_->GetSession(&ctx, request, &session);
  if (!status.ok()) return FromGrpcStatus(status);
  return session;
}

}  // namespace kvserve::client
