// The compact binary encoding of a StoredSession's contents (without its id and expiry,
// which the Redis key and TTL, or the disk file's header, carry): shared by
// RedisSessionStore (the value of each key) and DiskSessionStore (the body of each file).
//
// Layout (little-endian), version 3 (the one written):
//   offset  size  field
//        0     4  magic "KVS3"
//        4    16  partition (cache::HashToBytes)
//       20     1  has_head (0 or 1)
//       21    16  head block hash (zeros when has_head is 0)
//       37     8  version (int64, >= 1)
//       45     1  closed (0 or 1; 1: a tombstone, then has_head is 0 and both lists are
//                 empty)
//       46     8  lease deadline, Unix nanoseconds (wall clock); 0 when there is no
//                 lease holder
//       54     4  owner bytes O
//       58     O  owner
//              4  tenant bytes N (may be 0), then N bytes of tenant
//              4  lease holder bytes L (may be 0), then L bytes of holder
//              4  token count T, then T int32 tokens
//              4  turn-end count E, then E int32 turn ends
//
// Versions 1 and 2 (written by servers before session versions existed) are still read,
// as version-1 records that are not closed and hold no lease:
//        0     4  magic "KVS1" (no tenant) or "KVS2" (a tenant, N > 0)
//        4    16  partition
//       20     1  has_head
//       21    16  head block hash
//       37     4  owner bytes O, then O bytes of owner
//   version 2 only: 4 tenant bytes N (N > 0), then the tenant
//   both: 4 token count T, T int32 tokens, 4 turn-end count E, E int32 turn ends
// Each record written has one encoding (version 3), so a value that decodes encodes
// back to the same bytes only when it is version 3. Servers older than version 3 cannot
// read what this one writes (they drop such values as corrupt): upgrade every
// kvserve-cache sharing one Redis together.
//
// Encoded values are untrusted on the way back (they come from Redis or a file): every
// read is bounds-checked, a count larger than the bytes left fails the decode, and a
// value that is not the one encoding of its record (a flag other than 0 or 1, head bytes
// without has_head, a tombstone with tokens, a lease deadline without a holder, version
// < 1) is rejected.
#ifndef KVSERVE_CACHESVC_SESSION_ENCODING_H_
#define KVSERVE_CACHESVC_SESSION_ENCODING_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "cachesvc/block_store.h"

namespace kvserve::cachesvc {

// Bytes of the fields before the owner (through the owner length) in the version
// written (3); versions 1 and 2 have 41.
inline constexpr size_t kSessionMetaFixedBytes = 58;

// The encoding of `session` (id and expires_at are not part of it).
std::string EncodeSessionValue(const StoredSession& session);
// True when `value` decodes exactly (no byte short, none left over); then `*session`
// holds the decoded fields, keeps its id and gets expires_at = InfiniteFuture. False
// leaves `*session` unchanged.
bool DecodeSessionValue(std::string_view value, StoredSession* session);
// Reads only the fields through the owner (tolerating a value cut after the owner, and
// any bytes after it) and leaves tenant, lease holder, tokens and turn_ends empty;
// otherwise as DecodeSessionValue (version, closed and lease deadline are read).
bool DecodeSessionMeta(std::string_view value, StoredSession* session);

}  // namespace kvserve::cachesvc

#endif  // KVSERVE_CACHESVC_SESSION_ENCODING_H_
