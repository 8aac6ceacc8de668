#include "common/secure_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvserve::common {

absl::Status SecureRandomBytes(uint8_t* out, size_t size) {
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = getrandom(out + filled, size - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("getrandom failed: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SecureRandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (absl::Status s = SecureRandomBytes(reinterpret_cast<uint8_t*>(raw.data()), bytes); !s.ok()) {
    return s;
  }
  return absl::BytesToHexString(raw);
}

}  // namespace kvserve::common
