#include "server/drain_on_signal.h"

#include <cstdio>
#include <thread>

namespace kvserve::server {
namespace {

void Say(const DrainSteps& steps, const std::string& line) {
  std::printf("%s: %s\n", steps.program.c_str(), line.c_str());
  std::fflush(stdout);
}

}  // namespace

bool DrainOnSignal(const ShutdownSignals& signals, const DrainSteps& steps) {
  const int signal_number = signals.Wait();
  const std::string grace = absl::FormatDuration(steps.grace);
  if (steps.end_grace == nullptr) {
    Say(steps, "signal " + std::to_string(signal_number) + ", stopping (grace " + grace + ")");
    const bool clean = steps.drain(steps.grace);
    Say(steps, "stopped");
    return clean;
  }
  Say(steps, "signal " + std::to_string(signal_number) + ", draining (grace " + grace +
                 "; a second signal ends it now)");
  bool clean = false;
  std::thread drain([&signals, &steps, &clean] {
    clean = steps.drain(steps.grace);
    signals.NotifyDone();
  });
  while (signals.Wait() != ShutdownSignals::kDone) {
    Say(steps, "second signal, cancelling what is still running");
    steps.end_grace();
  }
  drain.join();
  Say(steps, clean ? "stopped (all requests finished)"
                   : "stopped (grace period over, the rest cancelled)");
  return clean;
}

}  // namespace kvserve::server
