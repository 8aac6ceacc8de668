// Splits a text/event-stream (server-sent events, the WHATWG HTML "event stream
// interpretation") into events, fed the bytes as they arrive in pieces of any size.
//
// Lines end with "\n", "\r\n" or "\r" (also when a "\r\n" is split across two feeds). A
// "data:" line adds its value (one leading space removed) to the event being read, data
// lines joined by "\n"; an empty line ends the event, which is dispatched when it had a
// data line. Comment lines (":", e.g. kvserve's ": ping") and other fields ("event:",
// "id:", "retry:") are ignored.
//
// Threading: none; one parser per stream.
#ifndef KVSERVE_CLIENT_SSE_PARSER_H_
#define KVSERVE_CLIENT_SSE_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::client {

class SseParser {
 public:
  // Default of max_event_bytes: 1 MiB.
  static constexpr size_t kDefaultMaxEventBytes = size_t{1} << 20;

  // An event (its unfinished line and its data together) longer than `max_event_bytes`
  // fails the stream.
  explicit SseParser(size_t max_event_bytes = kDefaultMaxEventBytes)
      : max_event_bytes_(max_event_bytes) {}

  // Reads `bytes`; appends the data of each event they complete to *events, in order.
  // RESOURCE_EXHAUSTED when an event grows over max_event_bytes (the parser is then
  // unusable).
  absl::Status Feed(std::string_view bytes, std::vector<std::string>* events);

 private:
  // One complete line (without its end).
  void Line(std::string_view line, std::vector<std::string>* events);

  const size_t max_event_bytes_;
  std::string line_;  // the unfinished line
  std::string data_;  // the data of the event being read
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte fed was "\r": a "\n" next is the same line end
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_SSE_PARSER_H_
