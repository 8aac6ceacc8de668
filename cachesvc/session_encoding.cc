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

void AppendU32(uint32_t v, std::string* out) {
  char b[4];
  std::memcpy(b, &v, 4);  // little-endian hosts only, as cache/block_record.cc
  out->append(b, 4);
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
  bool U32(uint32_t* v) {
    std::string_view b;
    if (!Bytes(4, &b)) return false;
    std::memcpy(v, b.data(), 4);
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

// Reads the fields through the owner; `*version` gets 1 or 2.
bool DecodeMeta(Reader& r, StoredSession* s, int* version) {
  std::string_view magic, partition, has_head, head, owner;
  if (!r.Bytes(4, &magic) || (magic != kMagicV1 && magic != kMagicV2) || !r.Bytes(16, &partition) ||
      !r.Bytes(1, &has_head) || !r.Bytes(16, &head) || !r.String(&owner)) {
    return false;
  }
  *version = magic == kMagicV1 ? 1 : 2;
  if (has_head[0] != 0 && has_head[0] != 1) return false;
  s->has_head = has_head[0] == 1;
  if (!cache::HashFromBytes(partition, &s->partition) || !cache::HashFromBytes(head, &s->head)) {
    return false;
  }
  // One encoding per record: without a head, its bytes must be the zeros Encode writes.
  if (!s->has_head && s->head != BlockHash{}) return false;
  s->owner = std::string(owner);
  return true;
}

}  // namespace

std::string EncodeSessionValue(const StoredSession& s) {
  std::string out;
  const bool v2 = !s.tenant.empty();
  out.reserve(kSessionMetaFixedBytes + s.owner.size() + (v2 ? 4 + s.tenant.size() : 0) + 8 +
              4 * (s.tokens.size() + s.turn_ends.size()));
  out.append(v2 ? kMagicV2 : kMagicV1);
  out.append(cache::HashToBytes(s.partition));
  out.push_back(s.has_head ? 1 : 0);
  out.append(cache::HashToBytes(s.has_head ? s.head : BlockHash{}));
  AppendU32(static_cast<uint32_t>(s.owner.size()), &out);
  out.append(s.owner);
  if (v2) {
    AppendU32(static_cast<uint32_t>(s.tenant.size()), &out);
    out.append(s.tenant);
  }
  AppendInts(s.tokens, &out);
  AppendInts(s.turn_ends, &out);
  return out;
}

bool DecodeSessionValue(std::string_view value, StoredSession* session) {
  Reader r(value);
  StoredSession s;
  int version = 0;
  if (!DecodeMeta(r, &s, &version)) return false;
  if (version == 2) {
    std::string_view tenant;
    if (!r.String(&tenant) || tenant.empty()) return false;  // empty: version 1's encoding
    s.tenant = std::string(tenant);
  }
  if (!r.Ints(&s.tokens) || !r.Ints(&s.turn_ends) || !r.AtEnd()) return false;
  s.id = std::move(session->id);
  *session = std::move(s);
  return true;
}

bool DecodeSessionMeta(std::string_view value, StoredSession* session) {
  Reader r(value);
  StoredSession s;
  int version = 0;
  if (!DecodeMeta(r, &s, &version)) return false;
  s.id = std::move(session->id);
  *session = std::move(s);
  return true;
}

}  // namespace kvserve::cachesvc
