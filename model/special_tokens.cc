#include "model/special_tokens.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace kvserve::model {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocabulary& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenKind kind = vocab.kinds[id];
    if (vocab.pieces[id].empty()) continue;
    if (kind == TokenKind::kControl || kind == TokenKind::kUnknown ||
        kind == TokenKind::kUserDefined) {
      candidates_.push_back(
          {vocab.pieces[id], id, kind == TokenKind::kUserDefined,
           std::binary_search(vocab.rstrip_ids.begin(), vocab.rstrip_ids.end(), id)});
    }
  }
  std::stable_sort(
      candidates_.begin(), candidates_.end(),
      [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
}

void SpecialTokenSplitter::Split(std::string_view text, bool parse_special,
                                 std::vector<TextPart>& out) const {
  if (text.empty()) return;
  std::vector<TextPart> parts = {{text, -1}};
  std::vector<TextPart> next;
  for (const Candidate& c : candidates_) {
    if (!parse_special && !c.user_defined) continue;
    next.clear();
    bool found = false;
    for (const TextPart& part : parts) {
      if (part.token >= 0) {
        next.push_back(part);
        continue;
      }
      std::string_view rest = part.text;
      for (size_t at = rest.find(c.text); at != std::string_view::npos; at = rest.find(c.text)) {
        found = true;
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({rest.substr(at, c.text.size()), c.id});
        rest.remove_prefix(at + c.text.size());
        while (c.rstrip && !rest.empty() && absl::ascii_isspace(static_cast<uint8_t>(rest[0]))) {
          rest.remove_prefix(1);
        }
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    if (found) parts.swap(next);
  }
  out.insert(out.end(), parts.begin(), parts.end());
}

}  // namespace kvserve::model
