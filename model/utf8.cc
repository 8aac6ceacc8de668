#include "model/utf8.h"

#include <cstdint>

namespace kvserve::model {

Utf8Step ScanUtf8(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Utf8Kind::kChar, 1};
  size_t need = 0;
  uint8_t lo = 0x80;  // allowed range of the second byte
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Kind::kIllFormed, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return {Utf8Kind::kIncomplete, i};
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < lo || b > hi) return {Utf8Kind::kIllFormed, i};
    lo = 0x80;
    hi = 0xBF;
  }
  return {Utf8Kind::kChar, need};
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step step = ScanUtf8(s.substr(i));
    if (step.kind != Utf8Kind::kChar) return false;
    i += step.n;
  }
  return true;
}

uint32_t DecodeUtf8Char(std::string_view ch) {
  const auto b0 = static_cast<uint8_t>(ch[0]);
  if (ch.size() == 1) return b0;
  uint32_t cp = b0 & (ch.size() == 2 ? 0x1F : ch.size() == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < ch.size(); ++i) cp = (cp << 6) | (static_cast<uint8_t>(ch[i]) & 0x3F);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace kvserve::model
