// The compact binary encoding of a StoredSession's contents (without its id and expiry,
// which the Redis key and TTL, or the disk file's header, carry): shared by
// RedisSessionStore (the value of each key) and DiskSessionStore (the body of each file).
//
// Layout (little-endian):
//   offset  size  field
//        0     4  magic: "KVS1" (version 1) or "KVS2" (version 2)
//        4    16  partition (cache::HashToBytes)
//       20     1  has_head (0 or 1)
//       21    16  head block hash (zeros when has_head is 0)
//       37     4  owner bytes O
//       41     O  owner
//   version 2 only:
//     41+O     4  tenant bytes N (N > 0)
//              N  tenant
//   both:
//              4  token count T, then T int32 tokens
//              4  turn-end count E, then E int32 turn ends
//
// A session without a tenant is written as version 1, exactly as before tenants
// existed (values written by older servers decode unchanged, and older servers read
// what this one writes for them); one with a tenant as version 2. Each session has one
// encoding: version 2 with an empty tenant is rejected.
//
// Encoded values are untrusted on the way back (they come from Redis or a file): every
// read is bounds-checked and a count larger than the bytes left fails the decode.
#ifndef KVSERVE_CACHESVC_SESSION_ENCODING_H_
#define KVSERVE_CACHESVC_SESSION_ENCODING_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

// Bytes of the fields before the owner (through the owner length).
inline constexpr size_t kSessionMetaFixedBytes = 41;

// The encoding of `session` (id and expires_at are not part of it).
std::string EncodeSessionValue(const StoredSession& session);
// True when `value` decodes exactly (no byte short, none left over); then `*session`
// holds the decoded fields, keeps its id and gets expires_at = InfiniteFuture. False
// leaves `*session` unchanged.
bool DecodeSessionValue(std::string_view value, StoredSession* session);
// Reads only the fields through the owner (tolerating a value cut after the owner)
// and leaves tenant, tokens and turn_ends empty; otherwise as DecodeSessionValue.
bool DecodeSessionMeta(std::string_view value, StoredSession* session);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_SESSION_ENCODING_H_
