// How a server process stops on SIGTERM/SIGINT, shared by kvserve and kvserve-cache: wait
// for the first signal, stop the server with a grace period, and (where the server can)
// end the grace period at once on a second signal. Knows neither the engine nor the cache:
// the server object passes its own steps.
#ifndef KVSERVE_SERVER_DRAIN_ON_SIGNAL_H_
#define KVSERVE_SERVER_DRAIN_ON_SIGNAL_H_

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "server/shutdown_signals.h"

namespace kvserve::server {

struct DrainSteps {
  // Prefix of the progress lines ("kvserve").
  std::string program;
  // How long work in flight may run once the first signal arrived.
  absl::Duration grace = absl::ZeroDuration();
  // Stops the server: refuses new work, lets work in flight run up to `grace`, cancels
  // the rest. Blocks until done; returns true when everything finished in time. Required.
  std::function<bool(absl::Duration grace)> drain;
  // Ends a running drain's grace period now (what is still running is cancelled).
  // Null: the server cannot; `drain` runs on the calling thread and further signals
  // wait for the process to exit.
  std::function<void()> end_grace;
};

// Blocks until `signals` reports a signal, then runs `steps.drain`; with an end_grace,
// every further signal during the drain calls it. Prints progress lines on stdout:
//   "<program>: signal N, draining (grace G; a second signal ends it now)",
//   "<program>: second signal, cancelling what is still running",
//   "<program>: stopped (all requests finished | grace period over, the rest cancelled)";
// without an end_grace "<program>: signal N, stopping (grace G)" and "<program>: stopped".
// Returns what `drain` returned. Call from one thread (ShutdownSignals::Wait's rule).
bool DrainOnSignal(const ShutdownSignals& signals, const DrainSteps& steps);

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_DRAIN_ON_SIGNAL_H_
