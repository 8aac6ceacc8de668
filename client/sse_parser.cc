#include "client/sse_parser.h"

#include "absl/strings/str_cat.h"

namespace kvserve::client {

absl::Status SseParser::Feed(std::string_view bytes, std::vector<std::string>* events) {
  for (const char c : bytes) {
    const bool crlf_tail = after_cr_ && c == '\n';
    after_cr_ = c == '\r';
    if (crlf_tail) continue;
    if (c == '\r' || c == '\n') {
      Line(line_, events);
      line_.clear();
      continue;
    }
    line_.push_back(c);
    if (line_.size() + data_.size() > max_event_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server-sent event over ", max_event_bytes_, " bytes"));
    }
  }
  return absl::OkStatus();
}

void SseParser::Line(std::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;  // a comment (empty field) or a field we do not use
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace kvserve::client
