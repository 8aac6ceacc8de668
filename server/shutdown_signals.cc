#include "server/shutdown_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace kvserve::server {
namespace {

// Write end of the self-pipe: the only state a signal handler can reach. Set once by
// Install(), never changed after.
int signal_pipe_write_fd = -1;

extern "C" void OnShutdownSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  // Async-signal-safe; a full pipe means a signal is already pending, which is enough.
  [[maybe_unused]] const ssize_t n = write(signal_pipe_write_fd, &byte, 1);
}

}  // namespace

absl::StatusOr<ShutdownSignals> ShutdownSignals::Install() {
  if (signal_pipe_write_fd != -1) {
    return absl::FailedPreconditionError("shutdown signals are already installed");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("cannot create the signal pipe");
  signal_pipe_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0) {
    return absl::InternalError("cannot install the SIGTERM/SIGINT handlers");
  }
  return ShutdownSignals(fds[0]);
}

int ShutdownSignals::Wait() const {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = read(read_fd_, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return kDone;  // cannot happen while the write end is open
  }
}

void ShutdownSignals::NotifyDone() const {
  const unsigned char byte = kDone;
  [[maybe_unused]] const ssize_t n = write(signal_pipe_write_fd, &byte, 1);
}

}  // namespace kvserve::server
