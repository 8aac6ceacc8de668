#include "cachesvc/trace_replay.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseTraceLineTest, ReadsKnownFieldsAndSkipsOthers) {
  absl::StatusOr<TraceRequest> r = ParseTraceLine(
      R"({"timestamp": 27, "input_length": 6758, "extra": {"a": [1, -2.5e3, "x\"y"]},)"
      R"( "output_length": 500, "hash_ids": [0, 1, 18446744073709551615], "z": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp_ms, 27);
  EXPECT_EQ(r->input_length, 6758);
  EXPECT_EQ(r->output_length, 500);
  EXPECT_THAT(r->hash_ids, ElementsAre(0u, 1u, 18446744073709551615u));
}

TEST(ParseTraceLineTest, RejectsMalformedLines) {
  for (
      const char* line : {
          "",
          "[]",
          "{",
          R"({"timestamp": 1})",
          R"({"hash_ids": []})",
          R"({"timestamp": -1, "hash_ids": []})",
          R"({"timestamp": 1.5, "hash_ids": []})",
          R"({"timestamp": 1, "hash_ids": [1, "2"]})",
          R"({"timestamp": 1, "hash_ids": [1,]})",
          R"({"timestamp": 1, "hash_ids": [18446744073709551616]})",
          R"({"timestamp": 1, "timestamp": 2, "hash_ids": []})",
          R"({"timestamp": 1, "hash_ids": []} trailing)",
          R"({"timestamp": 1 "hash_ids": []})",
          R"({"timestamp": 1, "hash_ids": [], "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})",
      }) {
    absl::StatusOr<TraceRequest> r = ParseTraceLine(line);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << line;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("column")) << line;
    }
  }
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(FormatTraceLineTest, ParsesBack) {
  TraceRequest req;
  req.timestamp_ms = 1234;
  req.input_length = 1500;
  req.output_length = 7;
  req.hash_ids = {0, 18446744073709551615u, 5};
  const std::string line = FormatTraceLine(req);
  EXPECT_EQ(line,
            "{\"timestamp\": 1234, \"input_length\": 1500, \"output_length\": 7, "
            "\"hash_ids\": [0, 18446744073709551615, 5]}");
  absl::StatusOr<TraceRequest> back = ParseTraceLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->timestamp_ms, 1234);
  EXPECT_EQ(back->input_length, 1500);
  EXPECT_EQ(back->output_length, 7);
  EXPECT_EQ(back->hash_ids, req.hash_ids);
  req.hash_ids.clear();
  EXPECT_TRUE(ParseTraceLine(FormatTraceLine(req)).ok());
}

TEST(ReadTraceTest, ErrorNamesTheLine) {
  const std::string path = WriteFile("bad.jsonl",
                                     "{\"timestamp\": 0, \"hash_ids\": [0, 1]}\n"
                                     "\n"
                                     "{\"timestamp\": 0, \"hash_ids\": [0, x]}\n");
  absl::StatusOr<std::vector<TraceRequest>> t = ReadTrace(path);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("bad.jsonl:3: "));
  t = ReadTrace(path, /*max_requests=*/1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 1u);
  EXPECT_EQ(ReadTrace(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(ReplayTest, CountsPrefixHits) {
  std::vector<TraceRequest> trace(4);
  trace[0].hash_ids = {0, 1, 2};
  trace[1].hash_ids = {0, 1, 3};  // 2 hits
  trace[2].hash_ids = {0, 4};     // 1 hit
  trace[3].hash_ids = {0, 1, 3};  // capacity 4: 3 and 1 may be gone
  ReplayOptions options;
  options.capacity_blocks = 100;
  for (Policy policy : {Policy::kLru, Policy::kConversation}) {
    options.policy = policy;
    absl::StatusOr<ReplayResult> r = Replay(trace, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->blocks, 11);
    EXPECT_EQ(r->hit_blocks, 2 + 1 + 3);
    EXPECT_EQ(r->inserted_blocks, 5);
    EXPECT_EQ(r->evicted_blocks, 0);
  }
  options.capacity_blocks = 0;
  EXPECT_EQ(Replay(trace, options).status().code(), absl::StatusCode::kInvalidArgument);
}

// The optimum keeps what comes back soonest and does not store what never comes back.
TEST(ReplayOptimumTest, KeepsTheBlocksUsedNext) {
  std::vector<TraceRequest> trace(4);
  trace[0].hash_ids = {0, 1};
  trace[1].hash_ids = {2, 3};  // never used again: not stored
  trace[2].hash_ids = {0, 1};  // 2 hits (LRU at capacity 2: none)
  trace[3].hash_ids = {0, 4};  // 1 hit
  ReplayOptions options;
  options.capacity_blocks = 2;
  absl::StatusOr<ReplayResult> r = ReplayOptimum(trace, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->blocks, 8);
  EXPECT_EQ(r->hit_blocks, 3);
  options.policy = Policy::kLru;
  absl::StatusOr<ReplayResult> lru = Replay(trace, options);
  ASSERT_TRUE(lru.ok()) << lru.status();
  EXPECT_EQ(lru->hit_blocks, 1);  // only block 0 of the last request
  options.capacity_blocks = 0;
  EXPECT_EQ(ReplayOptimum(trace, options).status().code(), absl::StatusCode::kInvalidArgument);
}

// The shared Mooncake conversation trace (not in the repository): the LRU baseline must
// reproduce the published figure and the default policy must beat it clearly.
TEST(ReplayTest, ConversationTraceBeatsLru) {
  const char* src = std::getenv("KVSERVE_SOURCE_DIR");
  const std::string path =
      std::string(src != nullptr ? src : ".") + "/../shared/traces/conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "no trace at " << path << " (the shared traces folder is absent)";
  }
  absl::StatusOr<std::vector<TraceRequest>> trace = ReadTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_GT(trace->size(), 10'000u);
  ReplayOptions options;
  options.capacity_blocks = 4000;
  options.policy = Policy::kLru;
  absl::StatusOr<ReplayResult> lru = Replay(*trace, options);
  ASSERT_TRUE(lru.ok()) << lru.status();
  options.policy = Policy::kConversation;
  absl::StatusOr<ReplayResult> conv = Replay(*trace, options);
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_NEAR(lru->hit_ratio(), 0.086, 0.002);
  absl::StatusOr<ReplayResult> optimum = ReplayOptimum(*trace, options);
  ASSERT_TRUE(optimum.ok()) << optimum.status();
  EXPECT_NEAR(optimum->hit_ratio(), 0.322, 0.002);  // the trace's published figure
  EXPECT_GT(conv->hit_ratio(), 1.5 * lru->hit_ratio());
  EXPECT_EQ(conv->no_room_requests, 0);
}

}  // namespace
}  // namespace kvserve::cachesvc
