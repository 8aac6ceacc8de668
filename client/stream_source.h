// Where the load generator (client/load_generator.h) sends its requests: a StreamSource
// starts one streamed generation per request and hands back its pieces as they arrive,
// whatever the protocol. Two sources exist: GrpcStreamSource (kvserve.v1.Inference/
// GenerateStream through a Client, below) and HttpStreamSource (the OpenAI-compatible
// HTTP API, streamed as server-sent events: client/http_stream_source.h). Both run a
// call on the thread that calls Next(), so the load generator's thread-per-stream
// workers measure either protocol the same way.
//
// Threading: a source is thread-safe (many calls at once); a call's Next/Finish on one
// thread at a time, Cancel from any thread. The source must outlive its calls.
#ifndef KVSERVE_CLIENT_STREAM_SOURCE_H_
#define KVSERVE_CLIENT_STREAM_SOURCE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/call_context.h"
#include "client/client.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve::client::bench {

// What one stream message brought.
struct StreamPiece {
  // Text produced since the previous piece (may be empty).
  std::string text;
  // Tokens it carries: gRPC, its token ids; HTTP, 1 for a chunk with text (the API does
  // not say how many tokens a chunk holds; kvserve sends one chunk per stream message).
  int tokens = 0;
  // The call's usage, on the piece that carries it (gRPC: the last message; HTTP: the
  // usage chunk, whose only fields are prompt_tokens, completion_tokens and
  // cached_tokens_local = prompt_tokens_details.cached_tokens, local and remote
  // together).
  std::optional<v1::Usage> usage;
};

// One streamed generation. Nothing is sent before the first Next().
class StreamCall {
 public:
  virtual ~StreamCall() = default;
  // The next piece into *piece: true, or false when the stream has ended (Finish() then
  // tells how).
  virtual bool Next(StreamPiece* piece) = 0;
  // Ends the call: a Next() waiting or to come returns false soon and Finish() answers
  // CANCELLED (unless the call had already ended). Idempotent.
  virtual void Cancel() = 0;
  // The final status; called before Next() returned false, it cancels the call first.
  virtual absl::Status Finish() = 0;
  // Where the call went and the server's retry hints on a failed end (CallInfo).
  virtual const CallInfo& info() const = 0;
};

class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // A call generating `request` (its prompt, sampling, limits and session).
  virtual std::unique_ptr<StreamCall> Start(const v1::GenerateRequest& request) const = 0;
};

// GenerateStream through `client` (its retries, deadline and bearer token).
class GrpcStreamSource : public StreamSource {
 public:
  // `client` must outlive the source.
  explicit GrpcStreamSource(const Client& client) : client_(client) {}
  std::unique_ptr<StreamCall> Start(const v1::GenerateRequest& request) const override;

 private:
  const Client& client_;
};

}  // namespace kvserve::client::bench

#endif  // KVSERVE_CLIENT_STREAM_SOURCE_H_
