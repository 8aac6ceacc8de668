// Process metrics of the running binary (memory, CPU, file descriptors, start time), in the
// names every Prometheus client library exports (process_*), read from procfs at scrape time.
// One implementation for kvserve (service::Metrics) and kvserve-cache (cachesvc::CacheMetrics).
//
//   process_resident_memory_bytes   gauge    resident set size (/proc/self/stat rss x page size)
//   process_virtual_memory_bytes    gauge    virtual memory size (/proc/self/stat vsize)
//   process_cpu_seconds_total       counter  user + system CPU time (utime + stime)
//   process_start_time_seconds      gauge    start time, Unix seconds (btime + starttime)
//   process_open_fds                gauge    entries of /proc/self/fd
//   process_max_fds                 gauge    soft "Max open files" of /proc/self/limits
//
// Everything read from procfs is parsed strictly; a file that is missing or does not parse
// gives an error status (ReadProcessSample) and an empty scrape of these families
// (ProcessCollector), never a crash or a made-up value.
#ifndef KVSERVE_SERVER_PROCESS_METRICS_H_
#define KVSERVE_SERVER_PROCESS_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvserve::server {

// Where and how to read procfs.
struct ProcfsOptions {
  // The procfs root: `<root>/stat` (btime) and `<root>/self/{stat,limits,fd/}`. Tests point
  // it at a folder they fill.
  std::string root = "/proc";
  // Clock ticks per second of utime/stime/starttime; 0 = sysconf(_SC_CLK_TCK).
  int64_t ticks_per_second = 0;
  // Bytes per page of rss; 0 = sysconf(_SC_PAGESIZE).
  int64_t page_bytes = 0;
};

// One reading of the process's figures.
struct ProcessSample {
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double cpu_seconds_total = 0;
  double start_time_seconds = 0;
  int64_t open_fds = 0;
  // -1 when the limit is "unlimited".
  int64_t max_fds = -1;
};

// Reads every figure of ProcessSample. Errors: NOT_FOUND when a file or folder cannot be
// opened, DATA_LOSS when one does not have the expected form (naming file and field).
absl::StatusOr<ProcessSample> ReadProcessSample(const ProcfsOptions& options);

// The families above from one ProcessSample (no I/O).
std::vector<prometheus::MetricFamily> ProcessFamilies(const ProcessSample& sample);

// A prometheus::Collectable that reads procfs on each Collect (no state between scrapes).
// Collect returns no family when procfs cannot be read (e.g. not Linux).
// Threading: Collect may be called from several threads at once.
class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(ProcfsOptions options = {});
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ProcfsOptions options_;
};

}  // namespace kvserve::server

#endif  // KVSERVE_SERVER_PROCESS_METRICS_H_
