// The C++ client of kvserve.v1.Inference: blocking calls with a per-call deadline,
// streaming generation as a cancellable iterator, retries (client/retry_policy.h), bearer
// tokens, and optional session-affine routing over several replicas.
//
// Routing: with one target every call goes there. With several, a call on a session
// (a turn, ForkSession, CloseSession, GetSession) goes to the replica that owns the
// session id on a consistent-hash ring (client/hash_ring.h), so a conversation's turns
// find its KV where the previous turn left it; a replica that answered UNAVAILABLE
// (stopped, draining, unreachable) is skipped for Options::replica_down_time and its
// sessions move to the next replica on the ring; they come back when it is up again.
// Other calls (stateless generation, tokenize, info) rotate over the replicas.
// OpenSession rotates too, but keeps a session only when it was opened on its own
// owner: a session opened elsewhere is closed there and another one opened (on average
// as many opens as there are replicas; after 4 x replicas tries the last one is kept).
// Otherwise the opening replica would keep an empty local copy of the session and, when
// the owner stops and the session moves there, continue that copy instead of the
// history in the session cache. A session continues on another replica only if the replicas share a
// session cache service (kvserve --session-cache): the new replica fetches its record and KV. Every
// session call also carries its id as metadata "kvserve-session-id", so that a router in front of
// the replicas (HAProxy, Envoy) can do the same by header.
//
// Retries: a failed attempt is retried per client/retry_policy.h (UNAVAILABLE with
// backoff, RESOURCE_EXHAUSTED after the server's hint, a shared retry budget). An
// UNAVAILABLE attempt moves to the next replica at once when there is one not yet tried
// in this call. All attempts of a call share its deadline (Options::timeout). A stream is
// retried only until its first message (after that, output has been seen).
//
// Threading: every method is thread-safe (one channel per replica, many concurrent
// calls). The client must outlive the streams it started.
#ifndef KVSERVE_CLIENT_CLIENT_H_
#define KVSERVE_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/call_context.h"
#include "client/generate_stream.h"
#include "client/hash_ring.h"
#include "client/retry_policy.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/inference.grpc.pb.h"

namespace kvserve::client {

class Client {
 public:
  struct Options {
    // Deadline of a call, all its attempts and backoffs included. Default 60 s.
    absl::Duration timeout = absl::Seconds(60);
    // How long Connect waits for a replica to become reachable. Default 5 s.
    absl::Duration connect_timeout = absl::Seconds(5);
    // Transport security (server/tls_credentials.h: MakeChannelCredentials); null (the
    // default) = plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Sent as "authorization: Bearer TOKEN" with every call when not empty (the server's
    // --auth-tokens). Default empty.
    std::string bearer_token;
    // When and how failed calls are retried (see client/retry_policy.h for defaults).
    RetryPolicy::Options retry;
    // After an UNAVAILABLE answer a replica is tried last for this long. Default 2 s.
    absl::Duration replica_down_time = absl::Seconds(2);
    // Points per replica on the affinity ring. Default HashRing::kDefaultVirtualNodes.
    int ring_virtual_nodes = HashRing::kDefaultVirtualNodes;
    // Injected for tests: how the client waits between attempts (default absl::SleepFor)
    // and its uniform [0, 1) random source for jitter (default a seeded Mersenne
    // twister). Both must be thread-safe.
    std::function<void(absl::Duration)> sleep;
    std::function<double()> uniform;
  };

  // A client of `targets` ("HOST:PORT" each, distinct; several = session-affine
  // routing). INVALID_ARGUMENT for no target, a duplicate or invalid options;
  // UNAVAILABLE when no target can be reached within options.connect_timeout (the others
  // are tried again at every call).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(std::vector<std::string> targets,
                                                         Options options);
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         Options options);

  // Generation. `info` (optional) receives the replica and attempt count.
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                                CallInfo* info = nullptr) const;
  // A streamed generation; nothing is sent before its first Next().
  std::unique_ptr<GenerateStream> StartGenerateStream(const v1::GenerateRequest& request) const;
  // Streams `request` to the end, calling `on_message` for every message on this thread;
  // returns the final status.
  absl::Status StreamGenerate(
      const v1::GenerateRequest& request,
      const std::function<void(const v1::GenerateStreamResponse&)>& on_message,
      CallInfo* info = nullptr) const;

  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_bos) const;
  absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& ids) const;
  absl::StatusOr<v1::ModelInfo> GetModelInfo() const;

  // Sessions. ttl of zero = the server's default. `info` (optional) as for Generate.
  absl::StatusOr<v1::Session> OpenSession(absl::Duration ttl = absl::ZeroDuration(),
                                          CallInfo* info = nullptr) const;
  absl::StatusOr<v1::Session> ForkSession(const std::string& parent_id,
                                          absl::Duration ttl = absl::ZeroDuration()) const;
  absl::Status CloseSession(const std::string& id, CallInfo* info = nullptr) const;
  absl::StatusOr<v1::Session> GetSession(const std::string& id) const;

  // The replica a call on `session_id` would go to now ("" = any: no session).
  std::string ReplicaFor(std::string_view session_id) const;
  const std::vector<std::string>& targets() const { return ring_.replicas(); }
  // Retry budget tokens left (see RetryPolicy::Options).
  double retry_budget_tokens() const { return retry_.budget_tokens(); }

 private:
  friend class GenerateStream;

  struct Replica {
    std::string target;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Inference::Stub> stub;
  };
  // One attempt's end: its status and the server's retry hint.
  struct AttemptOutcome {
    absl::Status status;
    std::optional<absl::Duration> hint;
    bool retry_after = false;  // a "retry-after" trailer came with the failure
  };
  using Attempt = absl::FunctionRef<AttemptOutcome(const Replica& replica, absl::Time deadline)>;

  Client(std::vector<Replica> replicas, Options options);

  // Runs `attempt` until it succeeds or the retry policy gives up (see the header
  // comment); returns the last attempt's status.
  // `pinned` >= 0: that replica only.
  absl::Status RunWithRetries(std::string_view session_id, CallInfo* info, Attempt attempt,
                              const std::function<bool()>& cancelled = nullptr,
                              int pinned = -1) const;
  // Replica indices to try for a call: `pinned` alone when >= 0, else ring preference for
  // a session, else a rotation; replicas marked down last.
  std::vector<int> Order(std::string_view session_id, int pinned = -1) const;
  void MarkDown(int replica) const;

  // A unary call with retries; `session_id` routes it and goes into its metadata.
  template <typename Request, typename Response>
  absl::StatusOr<Response> CallUnary(
      grpc::Status (v1::Inference::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
      const Request& request, std::string_view session_id, CallInfo* info = nullptr,
      int pinned = -1) const;

  const Options options_;
  std::vector<Replica> replicas_;
  HashRing ring_;
  mutable RetryPolicy retry_;
  std::function<void(absl::Duration)> sleep_;
  mutable std::atomic<uint64_t> rotation_{0};
  mutable std::mutex mu_;
  mutable std::vector<absl::Time> down_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_CLIENT_H_
