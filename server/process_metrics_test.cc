#include "server/process_metrics.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;

// A procfs tree in a temp folder: <root>/stat, <root>/self/{stat,limits,fd/}.
class FakeProcfs {
 public:
  FakeProcfs() {
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("procfs_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "self" / "fd");
  }
  ~FakeProcfs() { std::filesystem::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    std::ofstream(root_ / relative) << text;
  }
  void AddFds(int n) {
    for (int i = 0; i < n; ++i) Write("self/fd/" + std::to_string(i), "");
  }
  ProcfsOptions Options() const {
    return {.root = root_.string(), .ticks_per_second = 100, .page_bytes = 4096};
  }

 private:
  std::filesystem::path root_;
};

// Fields 3..24 of proc(5) after "pid (comm)": utime 250, stime 50, starttime 12345,
// vsize 1048576000, rss 2560 pages.
constexpr char kStatTail[] =
    " S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 1048576000 2560 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
constexpr char kLimits[] =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max open files            1024                 524288               files     \n";

TEST(ProcessMetricsTest, ReadsEveryFigureFromProcfs) {
  FakeProcfs procfs;
  // A command name with spaces and parentheses must not shift the fields.
  procfs.Write("self/stat", std::string("4242 (kv serve) (x)") + kStatTail);
  procfs.Write("stat", "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n");
  procfs.Write("self/limits", kLimits);
  procfs.AddFds(7);

  absl::StatusOr<ProcessSample> sample = ReadProcessSample(procfs.Options());
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_DOUBLE_EQ(sample->cpu_seconds_total, 3.0);  // (250 + 50) / 100
  EXPECT_DOUBLE_EQ(sample->resident_memory_bytes, 2560.0 * 4096);
  EXPECT_DOUBLE_EQ(sample->virtual_memory_bytes, 1048576000.0);
  EXPECT_DOUBLE_EQ(sample->start_time_seconds, 1700000000.0 + 123.45);
  EXPECT_EQ(sample->open_fds, 7);
  EXPECT_EQ(sample->max_fds, 1024);

  const std::string text =
      prometheus::TextSerializer().Serialize(ProcessCollector(procfs.Options()).Collect());
  for (const char* line :
       {"process_cpu_seconds_total 3", "process_resident_memory_bytes 10485760",
        "process_open_fds 7", "process_max_fds 1024", "process_start_time_seconds 1700000123.45",
        "# TYPE process_cpu_seconds_total counter", "# TYPE process_open_fds gauge"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(ProcessMetricsTest, UnlimitedOpenFilesOmitsMaxFds) {
  FakeProcfs procfs;
  procfs.Write("self/stat", std::string("1 (a)") + kStatTail);
  procfs.Write("stat", "btime 1\n");
  procfs.Write("self/limits", "Max open files            unlimited  unlimited  files\n");
  absl::StatusOr<ProcessSample> sample = ReadProcessSample(procfs.Options());
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->max_fds, -1);
  const std::string text = prometheus::TextSerializer().Serialize(ProcessFamilies(*sample));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("process_max_fds")));
  EXPECT_THAT(text, HasSubstr("process_open_fds 0"));
}

TEST(ProcessMetricsTest, MalformedOrMissingFilesAreErrorsAndAnEmptyScrape) {
  struct Case {
    std::string stat, boot, limits;
    absl::StatusCode code;
  };
  const std::string good_stat = std::string("1 (a)") + kStatTail;
  for (const Case& c : {
           Case{"1 (a S 1 2", "btime 1\n", kLimits, absl::StatusCode::kDataLoss},     // no ')'
           Case{"1 (a) S 1 2 3", "btime 1\n", kLimits, absl::StatusCode::kDataLoss},  // short
           Case{"1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 50", "btime 1\n", kLimits,
                absl::StatusCode::kDataLoss},                                 // utime not a number
           Case{good_stat, "cpu 1\n", kLimits, absl::StatusCode::kDataLoss},  // no btime
           Case{good_stat, "btime -5\n", kLimits, absl::StatusCode::kDataLoss},
           Case{good_stat, "btime 1\n", "Max open files  lots\n", absl::StatusCode::kDataLoss},
           Case{good_stat, "btime 1\n", std::string(70000, 'x'), absl::StatusCode::kDataLoss},
       }) {
    FakeProcfs procfs;
    procfs.Write("self/stat", c.stat);
    procfs.Write("stat", c.boot);
    procfs.Write("self/limits", c.limits);
    absl::StatusOr<ProcessSample> sample = ReadProcessSample(procfs.Options());
    EXPECT_EQ(sample.status().code(), c.code) << c.stat << " | " << c.boot;
    EXPECT_TRUE(ProcessCollector(procfs.Options()).Collect().empty());
  }
  FakeProcfs empty;  // no files at all
  EXPECT_EQ(ReadProcessSample(empty.Options()).status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcessMetricsTest, ThisProcessFromTheRealProcfs) {
  absl::StatusOr<ProcessSample> before = ReadProcessSample({});
  ASSERT_TRUE(before.ok()) << before.status();
  // One more descriptor shows up in the next reading.
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::StatusOr<ProcessSample> after = ReadProcessSample({});
  close(fd);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->open_fds, before->open_fds + 1);
  EXPECT_GT(before->resident_memory_bytes, 1 << 20);
  EXPECT_GE(before->virtual_memory_bytes, before->resident_memory_bytes);
  EXPECT_GE(after->cpu_seconds_total, before->cpu_seconds_total);
  // This test started within the last hour and not in the future.
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(before->start_time_seconds, now + 1);
  EXPECT_GT(before->start_time_seconds, now - 3600);
}

}  // namespace
}  // namespace kvserve::server
