#include "client/generate_stream.h"

#include <utility>

#include "client/client.h"

namespace kvserve::client {

GenerateStream::GenerateStream(const Client* client, v1::GenerateRequest request)
    : client_(client), request_(std::move(request)) {}

GenerateStream::~GenerateStream() {
  if (state_ == State::kStreaming) Finish().IgnoreError();
}

bool GenerateStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void GenerateStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool GenerateStream::Start(v1::GenerateStreamResponse* message) {
  bool got_message = false;
  const std::string& session_id = request_.session_id();
  final_status_ = client_->RunWithRetries(
      session_id, &info_,
      [&](const Client::Replica& replica, absl::Time deadline) -> Client::AttemptOutcome {
        grpc::ClientContext* context;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (cancelled_) return {absl::CancelledError("call cancelled"), std::nullopt};
          context_ = std::make_unique<grpc::ClientContext>();
          context = context_.get();
        }
        PrepareContext(context, deadline, client_->options_.bearer_token, session_id);
        reader_ = replica.stub->GenerateStream(context, request_);
        if (reader_->Read(message)) {
          got_message = true;
          return {absl::OkStatus(), std::nullopt};
        }
        absl::Status status = FromGrpcStatus(reader_->Finish());
        reader_.reset();
        // A stream that ends without a message but OK is not a failure to retry.
        if (status.ok()) return {status, std::nullopt};
        return {status, RetryHint(*context), HasRetryAfter(*context)};
      },
      [this] { return cancelled(); });
  state_ = got_message ? State::kStreaming : State::kDone;
  return got_message;
}

bool GenerateStream::Next(v1::GenerateStreamResponse* message) {
  switch (state_) {
    case State::kNotStarted:
      return Start(message);
    case State::kStreaming:
      if (reader_->Read(message)) return true;
      final_status_ = FromGrpcStatus(reader_->Finish());
      if (!final_status_.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        info_.retry_hint = RetryHint(*context_);
        info_.retry_after = HasRetryAfter(*context_);
      }
      state_ = State::kDone;
      return false;
    case State::kDone:
      return false;
  }
  return false;
}

absl::Status GenerateStream::Finish() {
  if (state_ == State::kNotStarted) {
    Cancel();
    final_status_ = absl::CancelledError("call cancelled before it started");
    state_ = State::kDone;
  }
  if (state_ == State::kStreaming) {
    Cancel();
    v1::GenerateStreamResponse discard;
    while (Next(&discard)) {
    }
  }
  return final_status_;
}

}  // namespace kvserve::client
