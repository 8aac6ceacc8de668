// SerialExecutor: order, timed tasks on a fake clock, posting from inside a task, and
// the drain on destruction.
#include "service/serial_executor.h"

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/testing/fake_clock.h"

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

TEST(SerialExecutorTest, TimedTasksWaitForTheirTimeThenRunInTimeOrder) {
  testing::FakeClock clock;
  const absl::Time t0 = clock.Now();
  Log log;
  SerialExecutor executor(&clock);
  executor.PostAt(t0 + absl::Milliseconds(20), [&log] { log.Add("20ms"); });
  executor.PostAt(t0 + absl::Milliseconds(10), [&log] { log.Add("10ms-a"); });
  executor.PostAt(t0 + absl::Milliseconds(10), [&log] { log.Add("10ms-b"); });
  executor.Post([&log] { log.Add("now"); });
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("now"));

  clock.Advance(absl::Milliseconds(9));
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("now"));

  clock.Advance(absl::Milliseconds(1));
  // The executor was woken by Advance; the flush runs after the due tasks it moved.
  Flush(executor);
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("now", "10ms-a", "10ms-b"));

  clock.Advance(absl::Milliseconds(100));
  Flush(executor);
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("now", "10ms-a", "10ms-b", "20ms"));
}

TEST(SerialExecutorTest, TaskDueInThePastRunsAtOnce) {
  testing::FakeClock clock;
  Log log;
  SerialExecutor executor(&clock);
  executor.PostAt(clock.Now() - absl::Seconds(1), [&log] { log.Add("past"); });
  executor.PostAt(clock.Now(), [&log] { log.Add("now"); });
  Flush(executor);
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("past", "now"));
}

TEST(SerialExecutorTest, RealClockTimedTaskRunsAfterItsTime) {
  SerialExecutor executor;
  std::promise<absl::Time> ran;
  const absl::Time when = absl::Now() + absl::Milliseconds(5);
  executor.PostAt(when, [&ran] { ran.set_value(absl::Now()); });
  EXPECT_GE(ran.get_future().get(), when);
}

TEST(SerialExecutorTest, TasksMayPostTasks) {
  testing::FakeClock clock;
  Log log;
  SerialExecutor executor(&clock);
  executor.Post([&] {
    log.Add("outer");
    executor.Post([&log] { log.Add("inner"); });
    executor.PostAt(clock.Now() + absl::Seconds(1), [&log] { log.Add("inner-timed"); });
  });
  executor.Post([&log] { log.Add("second"); });
  Flush(executor);
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("outer", "second", "inner"));
  clock.Advance(absl::Seconds(1));
  Flush(executor);
  Flush(executor);
  EXPECT_THAT(log.entries(), ElementsAre("outer", "second", "inner", "inner-timed"));
}

TEST(SerialExecutorTest, DestructorDrainsEveryTaskIncludingTimedOnesAndTheirFollowUps) {
  testing::FakeClock clock;
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

TEST(SerialExecutorTest, DestructorOfAnIdleExecutorReturns) {
  testing::FakeClock clock;
  SerialExecutor executor(&clock);
  Flush(executor);
}

}  // namespace
}  // namespace kvserve::service
