#include "model/bpe_encoder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/utf8.h"

namespace kvserve::model {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest
// take the code points from U+0100 up, in byte order.
std::array<uint32_t, 256> ByteCharacters() {
  std::array<uint32_t, 256> chars{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    chars[b] = printable ? b : next++;
  }
  return chars;
}

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<std::unique_ptr<BpeEncoder>> BpeEncoder::Create(const Vocabulary& vocab) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(vocab.pre_tokenizer);
  if (!pre.ok()) return pre.status();
  if (vocab.merges.empty()) {
    return absl::InvalidArgumentError("byte-level BPE vocabulary has no merges");
  }
  auto enc = std::unique_ptr<BpeEncoder>(new BpeEncoder(vocab, *std::move(pre)));
  enc->token_ids_.reserve(vocab.pieces.size());
  for (int32_t id = 0; id < vocab.size(); ++id) {
    enc->token_ids_[AbslView(vocab.pieces[id])] = id;
  }
  const std::array<uint32_t, 256> chars = ByteCharacters();
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(chars[b], enc->byte_chars_[b]);
    enc->byte_tokens_[b] = enc->FindToken(enc->byte_chars_[b]);
    enc->char_bytes_[chars[b]] = static_cast<uint8_t>(b);
  }
  enc->merges_.reserve(vocab.merges.size());
  std::string joined;  // reused: no allocation per merge once it has grown
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string_view rule = vocab.merges[rank];
    const size_t space = rule.find(' ', 1);
    if (space == std::string_view::npos) {
      ++enc->skipped_merges_;
      continue;
    }
    const std::string_view left = rule.substr(0, space);
    const std::string_view right = rule.substr(space + 1);
    joined.assign(left);
    joined.append(right);
    const int32_t l = enc->FindToken(left);
    const int32_t r = enc->FindToken(right);
    const int32_t result = enc->FindToken(joined);
    if (l < 0 || r < 0 || result < 0) {
      ++enc->skipped_merges_;
      continue;
    }
    enc->merges_.try_emplace(PairKey(l, r), Merge{static_cast<int32_t>(rank), result});
  }
  return enc;
}

int32_t BpeEncoder::FindToken(std::string_view text) const {
  const auto it = token_ids_.find(AbslView(text));
  return it == token_ids_.end() ? -1 : it->second;
}

void BpeEncoder::Encode(std::string_view text, bool /*at_boundary*/,
                        std::vector<int32_t>& out) const {
  std::vector<std::string_view> words;
  pre_.Split(text, words);
  Scratch scratch;
  for (std::string_view word : words) EncodeWord(word, scratch, out);
}

void BpeEncoder::EncodeWord(std::string_view word, Scratch& scratch,
                            std::vector<int32_t>& out) const {
  if (pre_.ignore_merges()) {
    scratch.mapped.clear();
    for (char c : word) scratch.mapped.append(byte_chars_[static_cast<uint8_t>(c)]);
    const int32_t id = FindToken(scratch.mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_tokens_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  // A min-heap on (rank, left): the best merge, leftmost among equals.
  std::vector<Bigram>& heap = scratch.heap;
  heap.clear();
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  auto try_add = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, symbols[left].id, symbols[right].id});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = symbols[b.left];
    if (left.id != b.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != b.right_id) continue;
    left.id = merges_.find(PairKey(b.left_id, b.right_id))->second.result;
    right.id = kGone;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = b.left;
    try_add(left.prev);
    try_add(b.left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
    if (symbols[i].id >= 0) out.push_back(symbols[i].id);
  }
}

std::string BpeEncoder::DecodedPiece(int32_t id) const {
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.kinds[id]) {
    case TokenKind::kNormal: {
      std::string bytes;
      bytes.reserve(piece.size());
      for (size_t i = 0; i < piece.size();) {
        const Utf8Step step = ScanUtf8(std::string_view(piece).substr(i));
        const size_t len = step.kind == Utf8Kind::kChar ? step.n : 1;
        const auto it =
            step.kind == Utf8Kind::kChar
                ? char_bytes_.find(DecodeUtf8Char(std::string_view(piece).substr(i, len)))
                : char_bytes_.end();
        if (it != char_bytes_.end()) {
          bytes.push_back(static_cast<char>(it->second));
        } else {
          bytes.append(piece, i, len);  // not a byte character: keep the text
        }
        i += len;
      }
      return bytes;
    }
    case TokenKind::kUserDefined:
      return piece;
    default:
      return "";
  }
}

}  // namespace kvserve::model
