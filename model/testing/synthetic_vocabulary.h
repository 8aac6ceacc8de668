// A small synthetic SentencePiece-style vocabulary (no model file needed) for fuzz
// targets and tests: <unk>, <s>, </s>, the 256 byte tokens, a few merges with tied
// scores (ties resolve leftmost-first), multi-byte pieces, a user-defined and an unused
// token. Test-only.
// MakeSyntheticChatTokenizer: the same with ChatML control tokens and a chat template.
#ifndef KVSERVE_MODEL_TESTING_SYNTHETIC_VOCABULARY_H_
#define KVSERVE_MODEL_TESTING_SYNTHETIC_VOCABULARY_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/tokenizer.h"
#include "model/vocabulary.h"

namespace kvserve::model {

// Never fails (the vocabulary is fixed); traps if Tokenizer::Create ever refuses it.
inline std::unique_ptr<Tokenizer> MakeSyntheticTokenizer() {
  Vocabulary v;
  auto add = [&v](std::string piece, float score, TokenKind kind) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  };
  add("<unk>", 0, TokenKind::kUnknown);
  add("<s>", 0, TokenKind::kControl);
  add("</s>", 0, TokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    add(absl::StrCat("<0x", absl::Hex(b, absl::kZeroPad2), ">"), 0, TokenKind::kByte);
  }
  // Equal scores on purpose: ties must resolve leftmost-first.
  const std::pair<const char*, float> pieces[] = {
      {"▁", -1},  {"▁t", -2}, {"he", -2},  {"▁the", -3}, {"in", -4},   {"er", -4},   {"an", -5},
      {"▁a", -6}, {"é", -7},  {"中", -8},  {"华", -8},   {"中华", -1}, {"🙂", -9}, {"<s", -2},
      {">", -10}, {"▁▁", -3}, {"\n", -10}, {"ing", -3},  {"th", -1},
  };
  for (const auto& [piece, score] : pieces) add(piece, score, TokenKind::kNormal);
  for (char c = 'a'; c <= 'z'; ++c) add(std::string(1, c), -20, TokenKind::kNormal);
  add("<user>", 0, TokenKind::kUserDefined);
  add("<unused>", 0, TokenKind::kUnused);
  auto tok = Tokenizer::Create(v);
  if (!tok.ok()) __builtin_trap();
  return *std::move(tok);
}

// The synthetic vocabulary plus ChatML's control tokens "<|im_start|>" and "<|im_end|>"
// (the last two ids) and `chat_template` as its tokenizer.chat_template. Never fails.
inline std::unique_ptr<Tokenizer> MakeSyntheticChatTokenizer(const std::string& chat_template) {
  Vocabulary v = MakeSyntheticTokenizer()->vocab();
  for (const char* control : {"<|im_start|>", "<|im_end|>"}) {
    v.pieces.push_back(control);
    v.scores.push_back(0);
    v.kinds.push_back(TokenKind::kControl);
  }
  v.chat_template = chat_template;
  auto tok = Tokenizer::Create(v);
  if (!tok.ok()) __builtin_trap();
  return *std::move(tok);
}

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TESTING_SYNTHETIC_VOCABULARY_H_
