// Finds stop strings in streamed text without emitting any part of them.
#ifndef KVSERVE_ENGINE_STOP_MATCHER_H_
#define KVSERVE_ENGINE_STOP_MATCHER_H_

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

// Fed the text deltas of a token stream (as produced by model::TokenStreamDecoder),
// StopMatcher returns the text that is safe to emit now. It holds back the longest
// tail of the text that is still a proper prefix of some stop string, because the
// next delta might complete it. When a stop string appears, the text is cut right
// before its earliest occurrence (earliest start position over all stop strings) and
// the matcher is done: later Feed/Flush calls return nothing.
//
// Emitted text never ends inside a UTF-8 character that the input had whole: the
// held-back tail starts where a stop string starts, and stop strings are expected to
// be valid UTF-8 (SamplingParams::Validate checks it).
//
// Invariants: the held-back text never contains a whole stop string and is shorter
// than the longest stop string. Empty stop strings are ignored.
//
// Threading: not thread-safe; one per request.
class StopMatcher {
 public:
  struct Result {
    std::string text;      // safe to emit now (may be empty)
    bool stopped = false;  // a stop string matched; `text` ends right before it
  };

  explicit StopMatcher(std::vector<std::string> stop_strings);

  // Appends `delta` to the stream. Once stopped, returns {"", true} forever.
  Result Feed(std::string_view delta);

  // The stream ended without a (further) match: returns the held-back text. Returns ""
  // when stopped. After Flush, the matcher is empty and may be fed again.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty stop strings
  std::string held_;                // held-back tail, see the invariants
  bool stopped_ = false;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_STOP_MATCHER_H_
