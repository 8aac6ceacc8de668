// cache::RemoteKvCache over gRPC: the kvserve side of kvserve.v1.SessionCache.
//
// `channels` channels (each its own TCP connection: a local subchannel pool, HTTP/2
// windows and frames sized for ~1 MB records); every call but Fetch uses the first. Each
// call gets the caller's deadline and, when a token is configured, "authorization: Bearer
// TOKEN". Fetch splits a long chain into up to fetch_streams ranges of at least
// fetch_min_stream_blocks blocks, one FetchBlocks stream each, spread over the channels,
// run in parallel (range 0 on the calling thread, the others on threads of their own for
// the call), each handing its records to on_record as they arrive (so on_record runs on
// up to fetch_streams threads at once; RemoteKvCache::Fetch); a range that ends short (a
// block missing, an error, a refusal) ends the fetch there and cancels the later ranges.
// It asks for chunks of up to fetch_chunk_bytes so that a ~1 MB record arrives as one
// chunk and reaches on_record without a copy (a view of the parsed message, whose memory
// the next message of the stream reuses); records split over several chunks are
// reassembled (and the chunk protocol checked: the service is not trusted) before
// on_record sees them. Store sends each record in chunks of at most store_chunk_bytes.
//
// Threading: thread-safe (gRPC channels and stubs are); calls block until done or the
// deadline.
#ifndef KVSERVE_CACHE_REMOTE_CACHE_CLIENT_H_
#define KVSERVE_CACHE_REMOTE_CACHE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/remote_kv_cache.h"
#include "grpcpp/grpcpp.h"
#include "kvserve/v1/session_cache.grpc.pb.h"

namespace kvserve::cache {

class RemoteCacheClient final : public cache::RemoteKvCache {
 public:
  struct Options {
    // gRPC target, e.g. "127.0.0.1:50061" or "dns:///cache:50061". Required.
    std::string target;
    // Bearer token sent with every call; empty = none.
    std::string token;
    // Transport security (see server/tls_credentials.h: MakeChannelCredentials); null
    // (the default) = plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Largest message sent or received. Default 8 MiB (as kvserve-cache's default).
    int32_t max_message_bytes = 8 << 20;
    // FetchBlocks max_chunk_bytes asked for (the service clamps to [64 KiB, 4 MiB]).
    // Default 4 MiB.
    int32_t fetch_chunk_bytes = 4 << 20;
    // Data bytes per StoreBlocks message. Default 1 MiB.
    int32_t store_chunk_bytes = 1 << 20;
    // Largest record accepted from the service. Default 64 MiB.
    int64_t max_record_bytes = int64_t{64} << 20;
    // Channels (TCP connections) to the service; Fetch's streams are spread over them.
    // Default 2.
    int32_t channels = 2;
    // FetchBlocks streams one Fetch runs in parallel, and the fewest blocks each range
    // gets (a chain shorter than 2 x fetch_min_stream_blocks is one stream). Defaults 4
    // and 4.
    int32_t fetch_streams = 4;
    int32_t fetch_min_stream_blocks = 4;
  };
  // INVALID_ARGUMENT for an empty target or sizes or counts out of range. Does not connect (the
  // first call does).
  static absl::StatusOr<std::unique_ptr<RemoteCacheClient>> Create(const Options& options);

  absl::StatusOr<Presence> Lookup(const cache::BlockHash& partition,
                                  std::span<const cache::BlockHash> chain,
                                  absl::Time deadline) override;
  absl::StatusOr<int32_t> Fetch(const cache::BlockHash& partition,
                                std::span<const cache::BlockHash> chain, absl::Time deadline,
                                const RecordSink& on_record) override;
  absl::StatusOr<int32_t> Store(const cache::BlockHash& partition,
                                std::span<const std::string> records, absl::Time deadline) override;
  // The service's answers are checked: a new version other than expected_version + 1,
  // or a record that is not the one asked for (another id, version < 1, a tombstone with
  // tokens, turn ends out of order, negative tokens, another holder's lease when one was
  // asked for and granted) is DATA_LOSS. ABORTED, FAILED_PRECONDITION and NOT_FOUND come
  // through unchanged.
  absl::StatusOr<int64_t> PutSession(const cache::RemoteSession& session, int64_t expected_version,
                                     const std::string& lease_holder, absl::Time deadline) override;
  absl::StatusOr<cache::RemoteSession> GetSession(const std::string& id,
                                                  const cache::LeaseRequest* lease,
                                                  absl::Time deadline) override;
  absl::Status ReleaseLease(const std::string& id, const std::string& holder,
                            absl::Time deadline) override;
  absl::Status DeleteSession(const std::string& id, absl::Time deadline) override;

  // The service's statistics (for tools and tests).
  absl::StatusOr<v1::CacheStats> GetStats(absl::Time deadline);
  // The first channel (for health checks in tests and tools).
  std::shared_ptr<grpc::Channel> channel() const { return channels_.front(); }

 private:
  RemoteCacheClient(const Options& options, std::vector<std::shared_ptr<grpc::Channel>> channels);
  // A context with the deadline and the token.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;
  // One FetchBlocks stream of `chain` on `stub`, its context prepared by the caller (who
  // may cancel it from another thread): checks the chunk protocol and hands each complete
  // record to `sink(index within chain, record)` (valid during the call), which returns
  // false to stop (the call is then cancelled). Returns the records handed out; DATA_LOSS
  // when the service broke the chunk protocol; the call's error when it failed before
  // anything stopped it.
  absl::StatusOr<int32_t> FetchStream(v1::SessionCache::Stub* stub, grpc::ClientContext* context,
                                      const cache::BlockHash& partition,
                                      std::span<const cache::BlockHash> chain,
                                      const RecordSink& sink) const;

  const Options options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;        // at least one
  std::vector<std::unique_ptr<v1::SessionCache::Stub>> stubs_;  // one per channel
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_REMOTE_CACHE_CLIENT_H_
