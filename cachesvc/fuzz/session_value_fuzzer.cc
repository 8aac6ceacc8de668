// libFuzzer target: session record values read back from Redis or a disk file are
// untrusted. Arbitrary bytes through DecodeSessionValue and DecodeSessionMeta; a value
// of the version written (3) that decodes must encode back to the same bytes (older
// versions decode into records that are written as version 3). Any crash, sanitizer report or leak
// is a bug; rejections are expected.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cachesvc/session_encoding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy: a read past the end hits AddressSanitizer's redzone.
  const std::string value(reinterpret_cast<const char*>(data), size);
  kvserve::cachesvc::StoredSession session;
  if (kvserve::cachesvc::DecodeSessionValue(value, &session)) {
    if (value.starts_with("KVS3") && kvserve::cachesvc::EncodeSessionValue(session) != value) {
      std::abort();
    }
  }
  kvserve::cachesvc::StoredSession meta;
  (void)kvserve::cachesvc::DecodeSessionMeta(value, &meta);
  return 0;
}
