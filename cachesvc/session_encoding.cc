#include "cachesvc/session_encoding.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cache/block_record.h"

namespace kvserve::cachesvc {
namespace {

constexpr std::string_view kMagicV1 = "KVS1";  // no tenant
constexpr std::string_view kMagicV2 = "KVS2";  // a tenant after the owner
constexpr std::string_view kMagicV3 = "KVS3";  // version, closed, lease

template <typename T>
void AppendRaw(T v, std::string* out) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, as cache/block_record.cc
  out->append(b, sizeof(T));
}

void AppendU32(uint32_t v, std::string* out) { AppendRaw<uint32_t>(v, out); }

void AppendString(std::string_view v, std::string* out) {
  AppendU32(static_cast<uint32_t>(v.size()), out);
  out->append(v);
}

void AppendInts(const std::vector<int32_t>& values, std::string* out) {
  AppendU32(static_cast<uint32_t>(values.size()), out);
  const size_t at = out->size();
  out->resize(at + 4 * values.size());
  if (!values.empty()) std::memcpy(out->data() + at, values.data(), 4 * values.size());
}

// A bounds-checked reader over an untrusted value.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool Bytes(size_t n, std::string_view* out) {
    if (n > data_.size() - pos_) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Raw(T* v) {
    std::string_view b;
    if (!Bytes(sizeof(T), &b)) return false;
    std::memcpy(v, b.data(), sizeof(T));
    return true;
  }
  bool U32(uint32_t* v) { return Raw(v); }
  // One byte that must be 0 or 1.
  bool Flag(bool* v) {
    uint8_t b = 0;
    if (!Raw(&b) || b > 1) return false;
    *v = b == 1;
    return true;
  }
  bool Ints(std::vector<int32_t>* out) {
    uint32_t n = 0;
    std::string_view b;
    if (!U32(&n) || n > (data_.size() - pos_) / 4 || !Bytes(4 * size_t{n}, &b)) return false;
    out->resize(n);
    if (n != 0) std::memcpy(out->data(), b.data(), b.size());
    return true;
  }
  // A length-prefixed string.
  bool String(std::string_view* out) {
    uint32_t n = 0;
    return U32(&n) && Bytes(n, out);
  }
  bool AtEnd() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Reads the fields through the owner; `*version` gets 1, 2 or 3.
bool DecodeMeta(Reader& r, StoredSession* s, int* version) {
  std::string_view magic, partition, head, owner;
  if (!r.Bytes(4, &magic)) return false;
  if (magic == kMagicV1) {
    *version = 1;
  } else if (magic == kMagicV2) {
    *version = 2;
  } else if (magic == kMagicV3) {
    *version = 3;
  } else {
    return false;
  }
  if (!r.Bytes(16, &partition) || !r.Flag(&s->has_head) || !r.Bytes(16, &head)) return false;
  if (!cache::HashFromBytes(partition, &s->partition) || !cache::HashFromBytes(head, &s->head)) {
    return false;
  }
  // One encoding per record: without a head, its bytes must be the zeros Encode writes.
  if (!s->has_head && s->head != BlockHash{}) return false;
  s->version = 1;
  s->closed = false;
  s->lease_expires_at = absl::InfinitePast();
  if (*version == 3) {
    int64_t lease_ns = 0;
    if (!r.Raw(&s->version) || s->version < 1 || !r.Flag(&s->closed) || !r.Raw(&lease_ns)) {
      return false;
    }
    if (s->closed && s->has_head) return false;
    // Non-zero only with a holder, which comes later: checked by the caller.
    if (lease_ns != 0) s->lease_expires_at = absl::FromUnixNanos(lease_ns);
  }
  if (!r.String(&owner)) return false;
  s->owner = std::string(owner);
  return true;
}

}  // namespace

std::string EncodeSessionValue(const StoredSession& s) {
  std::string out;
  const bool lease = !s.lease_holder.empty();
  out.reserve(kSessionMetaFixedBytes + s.owner.size() + 4 + s.tenant.size() + 4 +
              s.lease_holder.size() + 8 + 4 * (s.tokens.size() + s.turn_ends.size()));
  out.append(kMagicV3);
  out.append(cache::HashToBytes(s.partition));
  out.push_back(s.has_head ? 1 : 0);
  out.append(cache::HashToBytes(s.has_head ? s.head : BlockHash{}));
  AppendRaw<int64_t>(s.version, &out);
  out.push_back(s.closed ? 1 : 0);
  // A holder's deadline is never 0 ns: that is the Unix epoch, long past.
  int64_t lease_ns = lease ? absl::ToUnixNanos(s.lease_expires_at) : 0;
  if (lease && lease_ns == 0) lease_ns = 1;
  AppendRaw<int64_t>(lease_ns, &out);
  AppendString(s.owner, &out);
  AppendString(s.tenant, &out);
  AppendString(s.lease_holder, &out);
  AppendInts(s.tokens, &out);
  AppendInts(s.turn_ends, &out);
  return out;
}

bool DecodeSessionValue(std::string_view value, StoredSession* session) {
  Reader r(value);
  StoredSession s;
  int version = 0;
  if (!DecodeMeta(r, &s, &version)) return false;
  if (version >= 2) {
    std::string_view tenant;
    if (!r.String(&tenant)) return false;
    if (version == 2 && tenant.empty()) return false;  // empty: version 1's encoding
    s.tenant = std::string(tenant);
  }
  if (version == 3) {
    std::string_view holder;
    if (!r.String(&holder)) return false;
    // A deadline exactly when there is a holder.
    if (holder.empty() != (s.lease_expires_at == absl::InfinitePast())) return false;
    s.lease_holder = std::string(holder);
  }
  if (!r.Ints(&s.tokens) || !r.Ints(&s.turn_ends) || !r.AtEnd()) return false;
  if (s.closed && (!s.tokens.empty() || !s.turn_ends.empty())) return false;
  s.id = std::move(session->id);
  *session = std::move(s);
  return true;
}

bool DecodeSessionMeta(std::string_view value, StoredSession* session) {
  Reader r(value);
  StoredSession s;
  int version = 0;
  if (!DecodeMeta(r, &s, &version)) return false;
  s.lease_expires_at = absl::InfinitePast();  // the holder is not read
  s.id = std::move(session->id);
  *session = std::move(s);
  return true;
}

}  // namespace kvserve::cachesvc
