// A streamed generation as an iterator: Next() returns the messages in order, Cancel()
// ends the call from any thread, Finish() gives its final status.
//
//   std::unique_ptr<GenerateStream> stream = client.StartGenerateStream(request);
//   v1::GenerateStreamResponse message;
//   while (stream->Next(&message)) Print(message.text());
//   absl::Status status = stream->Finish();
//
// The first Next() sends the call; until a first message arrives, a failure is retried
// as the client's unary calls are (client/client.h). Afterwards a failure ends the
// stream.
//
// Threading: Next/Finish on one thread at a time; Cancel from any thread, any time.
// The Client must outlive the stream.
#ifndef KVSERVE_CLIENT_GENERATE_STREAM_H_
#define KVSERVE_CLIENT_GENERATE_STREAM_H_

#include <memory>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "client/call_context.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"

namespace kvserve::client {

class Client;

class GenerateStream {
 public:
  GenerateStream(const GenerateStream&) = delete;
  GenerateStream& operator=(const GenerateStream&) = delete;
  // Cancels the call if it is still running.
  ~GenerateStream();

  // The next message into *message: true, or false when the stream has ended (then
  // Finish() tells how). The last message carries finish_reason and usage.
  bool Next(v1::GenerateStreamResponse* message);
  // Ends the call: a Next() waiting or to come returns false soon, and Finish() answers
  // CANCELLED (unless the call had already ended). The server stops generating and
  // frees the request's KV. Idempotent. During a retry's backoff (before the first
  // message) it takes effect when the backoff ends: no further attempt is made.
  void Cancel();
  // The final status. Called before Next() returned false, it cancels the call first.
  absl::Status Finish();

  // The replica that served the stream and the attempts it took (set once the first
  // Next() returned), and the retry hints of a failed end (once Next() returned false).
  const CallInfo& info() const { return info_; }

 private:
  friend class Client;
  GenerateStream(const Client* client, v1::GenerateRequest request);

  // The first Next(): attempts until a first message or a final failure.
  bool Start(v1::GenerateStreamResponse* message);
  bool cancelled() const;

  enum class State { kNotStarted, kStreaming, kDone };

  const Client* const client_;
  const v1::GenerateRequest request_;
  State state_ = State::kNotStarted;
  absl::Status final_status_;
  CallInfo info_;

  mutable std::mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The context of the current attempt (replaced per attempt, under mu_, so that Cancel
  // reaches the attempt in flight). Declared before reader_: the reader of an attempt is
  // destroyed before its context.
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader_;
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_GENERATE_STREAM_H_
