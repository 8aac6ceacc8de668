// A small C++ client for kvserve.v1.Inference: blocking calls with deadlines, gRPC
// statuses turned into absl::Status (code and message kept).
#ifndef KVSERVE_CLIENT_CLIENT_H_
#define KVSERVE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"

namespace kvserve::client {

// grpc::Status -> absl::Status (the codes are the same numbers).
absl::Status FromGrpcStatus(const grpc::Status& status);

// Threading: every method is thread-safe (one channel, many concurrent calls).
class Client {
 public:
  struct Options {
    // Per-call deadline. Default 60 s.
    absl::Duration timeout = absl::Seconds(60);
    // How long Connect waits for the channel to become ready. Default 5 s.
    absl::Duration connect_timeout = absl::Seconds(5);
    // Transport security (see service/tls_credentials.h: MakeChannelCredentials); null
    // (the default) = plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };

  // Connects to `target` ("HOST:PORT"; TLS when options.credentials say so). UNAVAILABLE when the
  // server cannot be reached within options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         Options options);

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) const;
  // Streams a generation; `on_message` runs for every message, on this thread.
  // Returns the call's final status.
  absl::Status GenerateStream(
      const v1::GenerateRequest& request,
      const std::function<void(const v1::GenerateStreamResponse&)>& on_message) const;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_bos) const;
  absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& ids) const;
  absl::StatusOr<v1::ModelInfo> GetModelInfo() const;
  // ttl of zero = the server's default.
  absl::StatusOr<v1::Session> OpenSession(absl::Duration ttl = absl::ZeroDuration()) const;
  absl::StatusOr<v1::Session> ForkSession(const std::string& parent_id) const;
  absl::Status CloseSession(const std::string& id) const;
  absl::StatusOr<v1::Session> GetSession(const std::string& id) const;

  v1::Inference::Stub& stub() const { return *stub_; }

 private:
  Client(std::shared_ptr<grpc::Channel> channel, Options options);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  Options options_;
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_CLIENT_H_
