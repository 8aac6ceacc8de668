#include "client/stream_source.h"

#include <utility>

#include "client/generate_stream.h"

namespace kvserve::client::bench {
namespace {

class GrpcStreamCall : public StreamCall {
 public:
  explicit GrpcStreamCall(std::unique_ptr<GenerateStream> stream) : stream_(std::move(stream)) {}

  bool Next(StreamPiece* piece) override {
    if (!stream_->Next(&message_)) return false;
    piece->text = std::move(*message_.mutable_text());
    piece->tokens = message_.token_ids_size();
    piece->usage.reset();
    if (message_.has_usage()) piece->usage = std::move(*message_.mutable_usage());
    return true;
  }
  void Cancel() override { stream_->Cancel(); }
  absl::Status Finish() override { return stream_->Finish(); }
  const CallInfo& info() const override { return stream_->info(); }

 private:
  std::unique_ptr<GenerateStream> stream_;
  v1::GenerateStreamResponse message_;
};

}  // namespace

std::unique_ptr<StreamCall> GrpcStreamSource::Start(const v1::GenerateRequest& request) const {
  return std::make_unique<GrpcStreamCall>(client_.StartGenerateStream(request));
}

}  // namespace kvserve::client::bench
