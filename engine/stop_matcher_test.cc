#include "engine/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

// Feeds `deltas` and returns everything emitted (including Flush when not stopped),
// plus whether it stopped.
std::pair<std::string, bool> FeedAll(std::vector<std::string> stops,
                                     const std::vector<std::string>& deltas) {
  StopMatcher matcher(std::move(stops));
  std::string out;
  for (const std::string& d : deltas) {
    StopMatcher::Result r = matcher.Feed(d);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  out += matcher.Flush();
  return {out, false};
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.Feed("hello").text, "hello");
  EXPECT_EQ(matcher.Feed(" world").text, " world");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, MatchInsideOneDeltaCutsBeforeIt) {
  StopMatcher matcher({"END"});
  StopMatcher::Result r = matcher.Feed("abc END def");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "abc ");
  // Done: nothing more, ever.
  StopMatcher::Result after = matcher.Feed("more");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(after.text, "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, StopSplitAcrossDeltasIsHeldBackThenDropped) {
  StopMatcher matcher({"STOP"});
  StopMatcher::Result r1 = matcher.Feed("one ST");
  EXPECT_FALSE(r1.stopped);
  EXPECT_EQ(r1.text, "one ");  // "ST" might become "STOP"
  StopMatcher::Result r2 = matcher.Feed("O");
  EXPECT_EQ(r2.text, "");
  StopMatcher::Result r3 = matcher.Feed("P two");
  EXPECT_TRUE(r3.stopped);
  EXPECT_EQ(r3.text, "");
}

TEST(StopMatcherTest, FalseStartIsReleased) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.Feed("a ST").text, "a ");
  StopMatcher::Result r = matcher.Feed("ART");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "START");
  EXPECT_EQ(matcher.Feed("S").text, "");
  EXPECT_EQ(matcher.Flush(), "S");  // stream ended: the held tail is real text
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  // "aab" after "aaa...": the tail "aa" is a prefix; an extra 'a' shifts the window.
  EXPECT_EQ(FeedAll({"aab"}, {"xaa", "a", "a", "b", "tail"}),
            std::make_pair(std::string("xaa"), true));
  // Self-overlapping stop: "abab" in "abaabab".
  EXPECT_EQ(FeedAll({"abab"}, {"ab", "a", "ab", "ab", "z"}),
            std::make_pair(std::string("aba"), true));
  // One byte at a time.
  std::vector<std::string> bytes;
  for (char c : std::string("hello world</s>ignored")) bytes.push_back(std::string(1, c));
  EXPECT_EQ(FeedAll({"</s>"}, bytes), std::make_pair(std::string("hello world"), true));
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(FeedAll({"world", "lo w"}, {"hello world"}), std::make_pair(std::string("hel"), true));
  // A longer stop whose prefix is held must not hide a shorter one that completes.
  EXPECT_EQ(FeedAll({"abcd", "bc"}, {"xab", "c"}), std::make_pair(std::string("xa"), true));
  // The longest held prefix among several stops decides what is held.
  StopMatcher matcher({"xyz", "yzw"});
  EXPECT_EQ(matcher.Feed("00xy").text, "00");
  EXPECT_EQ(matcher.Feed("zq").text, "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcherTest, NoMatchEmitsEverythingEventually) {
  const std::vector<std::string> deltas = {"Once", " upon", " a", " time", ", there", " was"};
  EXPECT_EQ(FeedAll({"\n\n", "The End"}, deltas),
            std::make_pair(std::string("Once upon a time, there was"), false));
}

TEST(StopMatcherTest, MultibyteStopAndText) {
  // Stop "中华" (6 bytes); text arrives character by character.
  EXPECT_EQ(FeedAll({"中华"}, {"我", "爱", "中", "华", "人民"}),
            std::make_pair(std::string("我爱"), true));
  // Prefix "中" held back, then a different character releases it whole.
  StopMatcher matcher({"中华"});
  EXPECT_EQ(matcher.Feed("α中").text, "α");
  EXPECT_EQ(matcher.Feed("国").text, "中国");
  // Emoji stop split across deltas.
  EXPECT_EQ(FeedAll({"🙂!"}, {"hi 🙂", "!", " bye"}), std::make_pair(std::string("hi "), true));
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  EXPECT_EQ(FeedAll({""}, {"abc"}), std::make_pair(std::string("abc"), false));
}

TEST(StopMatcherTest, FlushResetsForReuse) {
  StopMatcher matcher({"ab"});
  EXPECT_EQ(matcher.Feed("xa").text, "x");
  EXPECT_EQ(matcher.Flush(), "a");
  EXPECT_EQ(matcher.Feed("b").text, "b");  // "a" was flushed: no match across the reset
}

}  // namespace
}  // namespace kvserve::engine
