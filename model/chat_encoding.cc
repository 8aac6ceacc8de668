#include "model/chat_encoding.h"

#include <algorithm>
#include <string>

namespace kvserve::model {

ChatEncoder::ChatEncoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  const Vocabulary& v = tokenizer.vocab();
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenKind kind = v.kinds[id];
    if ((kind == TokenKind::kControl || kind == TokenKind::kUserDefined) && !v.pieces[id].empty()) {
      specials_[static_cast<unsigned char>(v.pieces[id][0])].push_back({v.pieces[id], id});
    }
  }
  for (std::vector<Special>& bucket : specials_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const Special& a, const Special& b) {
      return a.text.size() > b.text.size();
    });
  }
}

const ChatEncoder::Special* ChatEncoder::MatchAt(std::string_view text) const {
  if (text.empty()) return nullptr;
  for (const Special& s : specials_[static_cast<unsigned char>(text.front())]) {
    if (text.starts_with(s.text)) return &s;
  }
  return nullptr;
}

std::vector<int32_t> ChatEncoder::Encode(std::span<const ChatSegment> segments) const {
  std::vector<int32_t> ids;
  std::string plain;  // text since the last special token
  auto flush = [&] {
    if (plain.empty()) return;
    const std::vector<int32_t> part = tokenizer_.Encode(plain, /*add_bos=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
    plain.clear();
  };
  for (const ChatSegment& segment : segments) {
    if (segment.is_content) {
      plain.append(segment.text);
      continue;
    }
    std::string_view rest = segment.text;
    while (!rest.empty()) {
      if (const Special* s = MatchAt(rest); s != nullptr) {
        flush();
        ids.push_back(s->id);
        rest.remove_prefix(s->text.size());
      } else {
        plain.push_back(rest.front());
        rest.remove_prefix(1);
      }
    }
  }
  flush();
  return ids;
}

std::vector<int32_t> ChatEncoder::EncodeTemplateText(std::string_view text) const {
  const ChatSegment segment{std::string(text), /*is_content=*/false};
  return Encode(std::span<const ChatSegment>(&segment, 1));
}

}  // namespace kvserve::model
