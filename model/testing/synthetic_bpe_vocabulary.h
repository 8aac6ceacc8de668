// A small synthetic byte-level BPE vocabulary (no model file needed) for fuzz targets
// and tests: the 256 GPT-2 byte characters, a few merges (including ones whose result
// feeds later merges and a rule whose result is no token), a control token and a
// user-defined token. Test-only.
#ifndef KVSERVE_MODEL_TESTING_SYNTHETIC_BPE_VOCABULARY_H_
#define KVSERVE_MODEL_TESTING_SYNTHETIC_BPE_VOCABULARY_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "model/tokenizer.h"
#include "model/utf8.h"
#include "model/vocabulary.h"

namespace kvserve::model {

// `pre_tokenizer` must be a name PreTokenizer::Create accepts; traps otherwise.
inline Vocabulary MakeSyntheticBpeVocabulary(std::string_view pre_tokenizer) {
  Vocabulary v;
  v.model = TokenizerModel::kBytePairEncoding;
  v.pre_tokenizer = std::string(pre_tokenizer);
  v.add_space_prefix = false;
  v.add_bos = true;
  auto add = [&v](std::string piece, TokenKind kind) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(0.0f);
    v.kinds.push_back(kind);
  };
  for (uint32_t b = 0, next = 256; b < 256; ++b) {  // GPT-2's byte characters
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    std::string ch;
    AppendUtf8(printable ? b : next++, ch);
    add(std::move(ch), TokenKind::kNormal);
  }
  // "Ġ" is the byte character of ' '.
  const std::pair<const char*, const char*> merges[] = {
      {"h", "e"},  {"Ġ", "t"}, {"Ġt", "he"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
      {"Ġ", "a"},  {"i", "n"}, {"in", "g"},  {"e", "r"}, {"Ġ", "Ġ"},   {"1", "2"},
      {"12", "3"}, {"ä", "¸"}, {"x", "y"},  // x y: result "xy" is no token (skipped)
  };
  for (const auto& [l, r] : merges) {
    v.merges.push_back(std::string(l) + " " + r);
    if (std::string_view(l) != "x") add(std::string(l) + r, TokenKind::kNormal);
  }
  add("<|end|>", TokenKind::kControl);
  add("<user>", TokenKind::kUserDefined);
  v.bos_id = v.size() - 2;
  v.eos_id = v.size() - 2;
  v.unk_id = -1;
  return v;
}

inline std::unique_ptr<Tokenizer> MakeSyntheticBpeTokenizer(std::string_view pre_tokenizer) {
  auto tok = Tokenizer::Create(MakeSyntheticBpeVocabulary(pre_tokenizer));
  if (!tok.ok()) __builtin_trap();
  return *std::move(tok);
}

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TESTING_SYNTHETIC_BPE_VOCABULARY_H_
