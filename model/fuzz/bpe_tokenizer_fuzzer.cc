// libFuzzer target for the byte-level BPE tokenizer and its pre-tokenizers. The first
// input byte picks the pre-tokenizer (low bits) and parse_special (bit 7); the rest is
// the text. Checks: the pre-tokenizer's words are non-empty and concatenate to the
// text; every id is in range and, without parse_special, never a control token;
// decoding gives well-formed UTF-8; well-formed text round-trips exactly (without
// parse_special: control tokens decode to nothing). The vocabulary is synthetic
// (model/testing/synthetic_bpe_vocabulary.h), so the target needs no model file.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/pre_tokenizer.h"
#include "model/testing/synthetic_bpe_vocabulary.h"
#include "model/tokenizer.h"
#include "model/utf8.h"

namespace kvserve::model {
namespace {

constexpr std::array<const char*, 10> kPreTokenizers = {
    "llama-bpe", "qwen2",  "gpt-2",   "mpt",          "starcoder",
    "refact",    "falcon", "default", "deepseek-llm", "deepseek-coder"};

void CheckWords(const Tokenizer& tok, std::string_view text) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(tok.vocab().pre_tokenizer);
  if (!pre.ok()) __builtin_trap();
  std::vector<std::string_view> words;
  pre->Split(text, words);
  std::string joined;
  for (std::string_view w : words) {
    if (w.empty()) __builtin_trap();
    joined.append(w);
  }
  if (joined != text) __builtin_trap();
}

void FuzzEncode(const Tokenizer& tok, std::string_view text, bool parse_special) {
  CheckWords(tok, text);
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/false, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab().size()) __builtin_trap();
    if (!parse_special && tok.vocab().kinds[id] == TokenKind::kControl) __builtin_trap();
  }
  const std::string decoded = tok.Decode(ids);
  if (!IsValidUtf8(decoded)) __builtin_trap();
  if (!parse_special && IsValidUtf8(text) && decoded != text) __builtin_trap();
}

}  // namespace
}  // namespace kvserve::model

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvserve::model::kPreTokenizers;
  static const auto* const toks = [] {
    auto* t = new std::vector<std::unique_ptr<kvserve::model::Tokenizer>>();
    for (const char* name : kPreTokenizers) {
      t->push_back(kvserve::model::MakeSyntheticBpeTokenizer(name));
    }
    return t;
  }();
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto& tok = *(*toks)[(data[0] & 0x7F) % kPreTokenizers.size()];
  kvserve::model::FuzzEncode(tok, text, (data[0] & 0x80) != 0);
  return 0;
}
