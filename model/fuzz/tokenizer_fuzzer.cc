// libFuzzer target for the tokenizer. The first input byte picks the mode:
//   even: encode the remaining bytes, then decode; checks that every id is a
//         valid, non-control token, that decoding gives well-formed UTF-8, and
//         that well-formed text without U+2581 or "<user>" round-trips exactly;
//   odd:  read the remaining bytes as little-endian int32 ids (any value, out of
//         range included) and decode them in full and by streaming; checks that
//         both agree and that no streamed part splits a UTF-8 character.
// The vocabulary is synthetic (built below) so the target needs no model file.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/testing/synthetic_vocabulary.h"
#include "model/tokenizer.h"
#include "model/vocabulary.h"

namespace kvserve::model {
namespace {

// Independent well-formedness check (Unicode table 3-7).
bool IsWellFormedUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int n = 0;
    uint32_t cp = 0;
    if ((b & 0xE0) == 0xC0) {
      n = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

void FuzzEncode(const Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true);
  if (ids.empty() || ids[0] != tok.vocab().bos_id) __builtin_trap();
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tok.vocab().size()) __builtin_trap();
    const TokenKind kind = tok.vocab().kinds[ids[i]];
    if (kind != TokenKind::kNormal && kind != TokenKind::kUserDefined && kind != TokenKind::kByte) {
      __builtin_trap();
    }
  }
  const std::string decoded = tok.Decode(ids);
  if (!IsWellFormedUtf8(decoded)) __builtin_trap();
  // SentencePiece puts its dummy-prefix space after a user-defined token too (as
  // llama.cpp does), so text holding "<user>" gains a space.
  if (IsWellFormedUtf8(text) && text.find("\xE2\x96\x81") == std::string_view::npos &&
      text.find("<user>") == std::string_view::npos && decoded != text) {
    __builtin_trap();
  }
}

void FuzzDecode(const Tokenizer& tok, std::string_view bytes) {
  std::vector<int32_t> ids(bytes.size() / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * sizeof(int32_t));
  // Fold most values into the vocabulary so pieces and bytes get mixed, but keep
  // the raw value when the top bit of the low byte is set (out-of-range ids).
  for (int32_t& id : ids) {
    if ((id & 0x80) == 0) id = static_cast<int32_t>(static_cast<uint32_t>(id) % tok.vocab().size());
  }
  const std::string full = tok.Decode(ids);
  if (!IsWellFormedUtf8(full)) __builtin_trap();
  TokenStreamDecoder dec(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string part = dec.Push(id);
    if (!IsWellFormedUtf8(part)) __builtin_trap();
    streamed += part;
  }
  streamed += dec.Flush();
  if (streamed != full) __builtin_trap();
}

}  // namespace
}  // namespace kvserve::model

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvserve::model::Tokenizer* const tok =
      kvserve::model::MakeSyntheticTokenizer().release();
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    kvserve::model::FuzzEncode(*tok, rest);
  } else {
    kvserve::model::FuzzDecode(*tok, rest);
  }
  return 0;
}
