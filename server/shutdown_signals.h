// SIGTERM and SIGINT for a server's main(): the handler writes the signal number into a
// self-pipe, and main() blocks in Wait() until a byte arrives. A handler (rather than
// sigwait with a blocked mask) works whichever thread gets the signal, including threads
// that libraries start before main() (OpenBLAS does).
//
// One per process (the handler can reach nothing but a global: the pipe's write end,
// set once by Install). Threading: Wait() from one thread; NotifyDone() from any thread.
#ifndef KVSERVE_SERVER_SHUTDOWN_SIGNALS_H_
#define KVSERVE_SERVER_SHUTDOWN_SIGNALS_H_

#include "absl/status/statusor.h"

namespace kvserve::server {

class ShutdownSignals {
 public:
  // What Wait() returns after NotifyDone() (signal numbers are never 0).
  static constexpr int kDone = 0;

  // Routes SIGTERM and SIGINT to the pipe. INTERNAL when the pipe or the handlers cannot
  // be set up; FAILED_PRECONDITION when called twice in one process.
  static absl::StatusOr<ShutdownSignals> Install();

  // Blocks until a signal arrives (returns its number) or NotifyDone() was called
  // (returns kDone).
  int Wait() const;
  // Wakes Wait() with kDone (e.g. a drain thread that finished).
  void NotifyDone() const;

 private:
  explicit ShutdownSignals(int read_fd) : read_fd_(read_fd) {}
  int read_fd_;
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_SHUTDOWN_SIGNALS_H_
