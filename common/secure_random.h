// Bytes from the operating system's cryptographically secure random source
// (getrandom(2)), for anything that must not be guessed: session ids, tokens.
// Never seeded by the caller, so no flag, restart or replica makes them repeat.
#ifndef KVSERVE_COMMON_SECURE_RANDOM_H_
#define KVSERVE_COMMON_SECURE_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::common {

// Fills `out[0, size)`. Blocks only until the kernel's pool is initialised (early boot).
// INTERNAL when the kernel refuses (no getrandom, seccomp); never falls back to a
// weaker source.
absl::Status SecureRandomBytes(uint8_t* out, size_t size);

// `bytes` random bytes as 2 * bytes lower-case hex digits.
absl::StatusOr<std::string> SecureRandomHex(size_t bytes);

}  // namespace kvserve::common

#endif  // KVSERVE_COMMON_SECURE_RANDOM_H_
