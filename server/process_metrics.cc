#include "server/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/metric_family.h"

namespace kvserve::server {
namespace {

// procfs files read here are a few hundred bytes; anything longer is not one of them.
constexpr std::streamsize kMaxProcFileBytes = 64 << 10;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string text(kMaxProcFileBytes + 1, '\0');
  in.read(text.data(), kMaxProcFileBytes + 1);
  if (in.gcount() > kMaxProcFileBytes) {
    return absl::DataLossError(absl::StrCat(path, " is longer than ", kMaxProcFileBytes, " bytes"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

absl::Status FieldError(const std::string& path, absl::string_view field) {
  return absl::DataLossError(absl::StrCat(path, ": cannot parse ", field));
}

// /proc/<pid>/stat: "pid (comm) state ppid ...". comm may hold spaces and parentheses, so
// the fields are counted from the last ')'. Field numbers are those of proc(5).
struct StatFields {
  uint64_t utime_ticks = 0;      // (14)
  uint64_t stime_ticks = 0;      // (15)
  uint64_t starttime_ticks = 0;  // (22) since boot
  uint64_t vsize_bytes = 0;      // (23)
  uint64_t rss_pages = 0;        // (24)
};

absl::StatusOr<StatFields> ParseSelfStat(const std::string& path, absl::string_view text) {
  const size_t paren = text.rfind(')');
  if (paren == absl::string_view::npos) return FieldError(path, "comm");
  // After ')' comes field (3), the state; index i of `rest` is field i + 3.
  std::vector<absl::string_view> rest =
      absl::StrSplit(text.substr(paren + 1), ' ', absl::SkipWhitespace());
  auto field = [&](int number, absl::string_view name, uint64_t& out) -> absl::Status {
    const size_t index = static_cast<size_t>(number - 3);
    if (index >= rest.size() || !absl::SimpleAtoi(rest[index], &out)) {
      return FieldError(path, name);
    }
    return absl::OkStatus();
  };
  StatFields f;
  for (auto [number, name, out] :
       {std::tuple{14, "utime", &f.utime_ticks}, std::tuple{15, "stime", &f.stime_ticks},
        std::tuple{22, "starttime", &f.starttime_ticks}, std::tuple{23, "vsize", &f.vsize_bytes},
        std::tuple{24, "rss", &f.rss_pages}}) {
    if (absl::Status s = field(number, name, *out); !s.ok()) return s;
  }
  return f;
}

// /proc/stat: the line "btime <seconds since the epoch at boot>".
absl::StatusOr<uint64_t> ParseBootTime(const std::string& path, absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      uint64_t seconds = 0;
      if (absl::SimpleAtoi(line, &seconds)) return seconds;
      break;
    }
  }
  return FieldError(path, "btime");
}

// /proc/<pid>/limits: "Max open files   <soft>   <hard>   files"; -1 for "unlimited".
absl::StatusOr<int64_t> ParseMaxOpenFiles(const std::string& path, absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (words.empty()) break;
    if (words[0] == "unlimited") return -1;
    int64_t soft = 0;
    if (absl::SimpleAtoi(words[0], &soft) && soft >= 0) return soft;
    break;
  }
  return FieldError(path, "Max open files");
}

absl::StatusOr<int64_t> CountEntries(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  int64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (name != "." && name != "..") ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace

absl::StatusOr<ProcessSample> ReadProcessSample(const ProcfsOptions& options) {
  const int64_t ticks =
      options.ticks_per_second > 0 ? options.ticks_per_second : sysconf(_SC_CLK_TCK);
  const int64_t page = options.page_bytes > 0 ? options.page_bytes : sysconf(_SC_PAGESIZE);
  if (ticks <= 0 || page <= 0) return absl::InternalError("sysconf: no clock tick or page size");

  const std::string stat_path = absl::StrCat(options.root, "/self/stat");
  absl::StatusOr<std::string> stat_text = ReadSmallFile(stat_path);
  if (!stat_text.ok()) return stat_text.status();
  absl::StatusOr<StatFields> stat = ParseSelfStat(stat_path, *stat_text);
  if (!stat.ok()) return stat.status();

  const std::string boot_path = absl::StrCat(options.root, "/stat");
  absl::StatusOr<std::string> boot_text = ReadSmallFile(boot_path);
  if (!boot_text.ok()) return boot_text.status();
  absl::StatusOr<uint64_t> boot_seconds = ParseBootTime(boot_path, *boot_text);
  if (!boot_seconds.ok()) return boot_seconds.status();

  const std::string limits_path = absl::StrCat(options.root, "/self/limits");
  absl::StatusOr<std::string> limits_text = ReadSmallFile(limits_path);
  if (!limits_text.ok()) return limits_text.status();
  absl::StatusOr<int64_t> max_fds = ParseMaxOpenFiles(limits_path, *limits_text);
  if (!max_fds.ok()) return max_fds.status();

  absl::StatusOr<int64_t> open_fds = CountEntries(absl::StrCat(options.root, "/self/fd"));
  if (!open_fds.ok()) return open_fds.status();

  const double tick_seconds = 1.0 / static_cast<double>(ticks);
  ProcessSample sample;
  sample.resident_memory_bytes = static_cast<double>(stat->rss_pages) * static_cast<double>(page);
  sample.virtual_memory_bytes = static_cast<double>(stat->vsize_bytes);
  sample.cpu_seconds_total =
      static_cast<double>(stat->utime_ticks + stat->stime_ticks) * tick_seconds;
  sample.start_time_seconds = static_cast<double>(*boot_seconds) +
                              static_cast<double>(stat->starttime_ticks) * tick_seconds;
  sample.open_fds = *open_fds;
  sample.max_fds = *max_fds;
  return sample;
}

std::vector<prometheus::MetricFamily> ProcessFamilies(const ProcessSample& sample) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(SingleValueFamily("process_resident_memory_bytes", "Resident memory size in bytes.",
                                  MetricType::Gauge, sample.resident_memory_bytes));
  out.push_back(SingleValueFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                                  MetricType::Gauge, sample.virtual_memory_bytes));
  out.push_back(SingleValueFamily("process_cpu_seconds_total",
                                  "User and system CPU time spent in seconds.", MetricType::Counter,
                                  sample.cpu_seconds_total));
  out.push_back(SingleValueFamily("process_start_time_seconds",
                                  "Start time of the process since the Unix epoch in seconds.",
                                  MetricType::Gauge, sample.start_time_seconds));
  out.push_back(SingleValueFamily("process_open_fds", "Number of open file descriptors.",
                                  MetricType::Gauge, static_cast<double>(sample.open_fds)));
  if (sample.max_fds >= 0) {
    out.push_back(SingleValueFamily("process_max_fds", "Maximum number of open file descriptors.",
                                    MetricType::Gauge, static_cast<double>(sample.max_fds)));
  }
  return out;
}

ProcessCollector::ProcessCollector(ProcfsOptions options) : options_(std::move(options)) {}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  absl::StatusOr<ProcessSample> sample = ReadProcessSample(options_);
  if (!sample.ok()) return {};
  return ProcessFamilies(*sample);
}

}  // namespace kvserve::server
