// "HOST:PORT" listen addresses, as every kvserve option spells them.
#ifndef KVSERVE_SERVER_HOST_PORT_H_
#define KVSERVE_SERVER_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace kvserve::server {

struct HostPort {
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;      // [0, 65535]; 0 = any free port
};

// Splits "HOST:PORT" ("[::1]:50051" for IPv6). INVALID_ARGUMENT naming `option_name`
// when malformed or the port is outside [0, 65535].
absl::StatusOr<HostPort> ParseHostPort(const std::string& address, const std::string& option_name);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_HOST_PORT_H_
