// gRPC channel arguments for streams of ~1 MB block records, the same on both ends of
// kvserve.v1.SessionCache (RemoteCacheClient's channels, CacheServer): a stream window of
// a few records from the start (instead of 64 KiB grown by BDP probes), HTTP/2 frames of
// up to a whole record (instead of 16 KiB) and socket reads to match.
#ifndef KVSERVE_CACHE_RECORD_TRANSPORT_H_
#define KVSERVE_CACHE_RECORD_TRANSPORT_H_

#include <array>

#include "grpc/grpc.h"

namespace kvserve::cache {

struct TransportArg {
  const char* name;
  int value;
};

inline constexpr std::array<TransportArg, 4> kRecordTransportArgs = {{
    {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20},
    {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 4 << 20},
    {GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20},
    {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 1 << 20},
}};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_RECORD_TRANSPORT_H_
