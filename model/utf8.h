// UTF-8 well-formedness, shared by the tokenizer (byte fallback, UTF-8 repair when
// decoding) and by request validation (stop strings): one definition of "valid UTF-8".
#ifndef KVSERVE_MODEL_UTF8_H_
#define KVSERVE_MODEL_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::model {

// What the bytes at the start of a string hold.
enum class Utf8Kind {
  kChar,        // a well-formed character of n bytes
  kIllFormed,   // n bytes (n >= 1) that are a maximal ill-formed subpart
  kIncomplete,  // all n bytes are a well-formed prefix of a character, but the string ends
};

struct Utf8Step {
  Utf8Kind kind;
  size_t n;  // >= 1
};

// Classifies the UTF-8 sequence at the start of `s` by Unicode table 3-7 (no overlong
// forms, no surrogates, nothing above U+10FFFF). Precondition: !s.empty().
// Pure; O(1).
Utf8Step ScanUtf8(std::string_view s);

// True when all of `s` is well-formed UTF-8 (the empty string is). O(s.size()).
bool IsValidUtf8(std::string_view s);

// The code point of `ch`, which must be one well-formed character (ScanUtf8 gave
// kChar with n == ch.size()). O(1).
uint32_t DecodeUtf8Char(std::string_view ch);

// Appends the UTF-8 encoding of code point `cp` (precondition: a Unicode scalar value).
void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_UTF8_H_
