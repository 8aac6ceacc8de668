#include "server/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::server {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address, const std::string& option_name) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(option_name, " must be HOST:PORT, got \"", address, "\""));
  }
  std::string host = address.substr(0, colon);
  const bool bracketed = host.front() == '[';
  if (bracketed ? host.size() < 3 || host.back() != ']' : host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        option_name, ": an IPv6 host must be in brackets ([::1]:50051), got \"", address, "\""));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(option_name, ": port must be a number in [0, 65535], got \"", address, "\""));
  }
  if (bracketed) host = host.substr(1, host.size() - 2);
  return HostPort{std::move(host), port};
}

}  // namespace kvserve::server
