// SerialExecutor: order, timed tasks on a fake clock, posting from inside a task, and
// the drain on destruction.
#include "service/serial_executor.h"

#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::service {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// What the tasks of a test ran, in order. Thread-safe.
class Log {
 public:
  void Add(std::string entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(entry));
  }
  std::vector<std::string> entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> entries_;
};

// Blocks until every task posted to `executor` before this call (and due) has run.
void Flush(SerialExecutor& executor) {
  std::promise<void> done;
  executor.Post([&done] { done.set_value(); });
  done.get_future().wait();
}

// Blocks until every task due by the clock has run. One flush is not enough: a task that
// became due while the flush was queued runs after it (due tasks join the queue's end).
void RunDue(SerialExecutor& executor) {
  Flush(executor);
  Flush(executor);
}

// An executor on a fake clock, with a log for its tasks.
class FakeClockTest : public ::testing::Test {
 protected:
  // Posts a task that logs `entry`, to run at `when` (or at once without it).
  void PostLog(const std::string& entry, std::optional<absl::Time> when = std::nullopt) {
    auto task = [this, entry] { log_.Add(entry); };
    if (when.has_value()) {
      executor_.PostAt(*when, task);
    } else {
      executor_.Post(task);
    }
  }

  // Moves the clock forward by `d`, runs what is due, returns the log so far.
  std::vector<std::string> AdvanceAndRun(absl::Duration d) {
    clock_.Advance(d);
    RunDue(executor_);
    return log_.entries();
  }

  common::testing::FakeClock clock_;
  const absl::Time t0_ = clock_.Now();
  Log log_;
  SerialExecutor executor_{&clock_};
};

TEST(SerialExecutorTest, RunsPostedTasksInOrderOnOneOtherThread) {
  Log log;
  std::vector<std::thread::id> threads;
  {
    SerialExecutor executor;
    for (int i = 0; i < 100; ++i) {
      executor.Post([&log, &threads, i] {
        threads.push_back(std::this_thread::get_id());
        log.Add(std::to_string(i));
      });
    }
    Flush(executor);
  }
  std::vector<std::string> want;
  for (int i = 0; i < 100; ++i) want.push_back(std::to_string(i));
  EXPECT_EQ(log.entries(), want);
  ASSERT_EQ(threads.size(), 100u);
  EXPECT_NE(threads.front(), std::this_thread::get_id());
  for (const std::thread::id& id : threads) EXPECT_EQ(id, threads.front());
}

TEST_F(FakeClockTest, TimedTasksWaitForTheirTimeThenRunInTimeOrder) {
  PostLog("20ms", t0_ + absl::Milliseconds(20));
  PostLog("10ms-a", t0_ + absl::Milliseconds(10));
  PostLog("10ms-b", t0_ + absl::Milliseconds(10));
  PostLog("now");
  EXPECT_THAT(AdvanceAndRun(absl::ZeroDuration()), ElementsAre("now"));
  EXPECT_THAT(AdvanceAndRun(absl::Milliseconds(9)), ElementsAre("now"));
  // Advance wakes the executor, which waits for the first task's time.
  EXPECT_THAT(AdvanceAndRun(absl::Milliseconds(1)), ElementsAre("now", "10ms-a", "10ms-b"));
  EXPECT_THAT(AdvanceAndRun(absl::Milliseconds(100)),
              ElementsAre("now", "10ms-a", "10ms-b", "20ms"));
}

TEST_F(FakeClockTest, TaskDueInThePastRunsAtOnce) {
  PostLog("past", t0_ - absl::Seconds(1));
  PostLog("now", t0_);
  EXPECT_THAT(AdvanceAndRun(absl::ZeroDuration()), ElementsAre("past", "now"));
}

TEST(SerialExecutorTest, RealClockTimedTaskRunsAfterItsTime) {
  SerialExecutor executor;
  std::promise<absl::Time> ran;
  const absl::Time when = absl::Now() + absl::Milliseconds(5);
  executor.PostAt(when, [&ran] { ran.set_value(absl::Now()); });
  EXPECT_GE(ran.get_future().get(), when);
}

TEST_F(FakeClockTest, TasksMayPostTasks) {
  // Hold the thread until "second" is queued behind the outer task.
  std::promise<void> gate;
  executor_.Post([opened = gate.get_future().share()] { opened.wait(); });
  executor_.Post([this] {
    log_.Add("outer");
    PostLog("inner");
    PostLog("inner-timed", clock_.Now() + absl::Seconds(1));
  });
  PostLog("second");
  gate.set_value();
  EXPECT_THAT(AdvanceAndRun(absl::ZeroDuration()), ElementsAre("outer", "second", "inner"));
  EXPECT_THAT(AdvanceAndRun(absl::Seconds(1)),
              ElementsAre("outer", "second", "inner", "inner-timed"));
}

TEST(SerialExecutorTest, DestructorDrainsEveryTaskIncludingTimedOnesAndTheirFollowUps) {
  common::testing::FakeClock clock;
  Log log;
  std::promise<void> release;
  std::thread releaser;
  {
    SerialExecutor executor(&clock);
    // Hold the thread so that everything below is likely still queued at destruction
    // (the order checked below is the same either way).
    std::shared_future<void> released = release.get_future().share();
    executor.Post([released] { released.wait(); });
    executor.PostAt(clock.Now() + absl::Hours(2), [&log] { log.Add("2h"); });
    executor.PostAt(clock.Now() + absl::Hours(1), [&] {
      log.Add("1h");
      executor.Post([&log] { log.Add("posted-while-draining"); });
    });
    executor.Post([&log] { log.Add("ready"); });
    EXPECT_THAT(log.entries(), IsEmpty());
    releaser = std::thread([&release] {
      absl::SleepFor(absl::Milliseconds(20));
      release.set_value();
    });
  }  // the destructor runs here, the clock never reaches the timed tasks' times
  releaser.join();
  EXPECT_THAT(log.entries(), ElementsAre("ready", "1h", "2h", "posted-while-draining"));
}

TEST_F(FakeClockTest, DestructorOfAnIdleExecutorReturns) { RunDue(executor_); }

}  // namespace
}  // namespace kvserve::service
