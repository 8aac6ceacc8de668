#include "model/spm_encoder.h"

#include <cmath>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/utf8.h"

namespace kvserve::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Parses "<0xNN>" (either case of hex digits); -1 when `piece` is not of that form.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

// Debian's Abseil is built with its own string_view, which the map's hasher takes.
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ReplaceSpaceMarkers(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      i += kSpaceMarker.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpmEncoder>> SpmEncoder::Create(const Vocabulary& vocab) {
  auto enc = std::unique_ptr<SpmEncoder>(new SpmEncoder(vocab));
  enc->byte_ids_.fill(-1);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& piece = vocab.pieces[id];
    if (std::isnan(vocab.scores[id])) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " has a NaN score"));
    }
    switch (vocab.kinds[id]) {
      case TokenKind::kNormal:
      case TokenKind::kUserDefined:
        enc->piece_ids_.try_emplace(piece, id);  // the lower id wins
        break;
      case TokenKind::kByte: {
        const int byte = ParseBytePiece(piece);
        if (byte < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("byte token ", id, " has piece \"", piece, "\", expected <0xNN>"));
        }
        if (enc->byte_ids_[byte] != -1) {
          return absl::InvalidArgumentError(absl::StrCat("byte token ", id, " repeats ", piece,
                                                         " (token ", enc->byte_ids_[byte], ")"));
        }
        enc->byte_ids_[byte] = id;
        break;
      }
      default:
        break;
    }
  }
  for (int byte = 0; byte < 256; ++byte) {
    if (enc->byte_ids_[byte] == -1) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary lacks the byte-fallback token <0x",
                                                     absl::Hex(byte, absl::kZeroPad2), ">"));
    }
  }
  return enc;
}

std::string SpmEncoder::DecodedPiece(int32_t id) const {
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.kinds[id]) {
    case TokenKind::kNormal:
      return ReplaceSpaceMarkers(piece);
    case TokenKind::kUserDefined:
      return piece;
    case TokenKind::kByte:
      return std::string(1, static_cast<char>(ParseBytePiece(piece)));
    default:  // control, unknown, unused and undefined kinds decode to nothing
      return "";
  }
}

void SpmEncoder::Encode(std::string_view text, bool at_boundary, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // Steps 1 and 2: dummy prefix, spaces as "▁".
  std::string norm;
  norm.reserve(text.size() + kSpaceMarker.size() * 4);
  if (vocab_.add_space_prefix && at_boundary) norm.append(kSpaceMarker);
  for (char c : text) {
    if (c == ' ') {
      norm.append(kSpaceMarker);
    } else {
      norm.push_back(c);
    }
  }

  // Step 3: one symbol per character; a doubly linked list over `symbols`.
  // Invariant: live symbols (len > 0) tile `norm` in list order.
  struct Symbol {
    size_t offset;
    size_t len;    // 0 once merged into its left neighbour
    int64_t prev;  // -1: none
    int64_t next;  // -1: none
  };
  std::vector<Symbol> symbols;
  symbols.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    const Utf8Step step = ScanUtf8(std::string_view(norm).substr(i));
    const size_t len = step.kind == Utf8Kind::kChar ? step.n : 1;
    const auto index = static_cast<int64_t>(symbols.size());
    symbols.push_back({i, len, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    i += len;
  }

  // Step 4: merge candidates, best first (higher score, then leftmost). Entries
  // go stale when a side merges elsewhere; they are checked when popped.
  struct Bigram {
    float score;
    int64_t left;
    int64_t right;
    size_t len;  // bytes of left + right when the entry was made
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[left].len + symbols[right].len;
    const auto it =
        piece_ids_.find(AbslView(std::string_view(norm).substr(symbols[left].offset, len)));
    if (it == piece_ids_.end()) return;
    queue.push({vocab_.scores[it->second], left, right, len});
  };
  for (int64_t i = 1; i < static_cast<int64_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.len == 0 || right.len == 0 || left.next != b.right || left.len + right.len != b.len) {
      continue;  // stale
    }
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  // Step 5: pieces, or bytes for symbols that are no piece.
  for (int64_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view s = std::string_view(norm).substr(symbols[i].offset, symbols[i].len);
    const auto it = piece_ids_.find(AbslView(s));
    if (it != piece_ids_.end()) {
      out.push_back(it->second);
    } else {
      for (char c : s) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    }
  }
}

}  // namespace kvserve::model
