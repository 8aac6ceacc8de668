#include "model/unicode_class.h"

#include <unicode/uchar.h>

#include "model/utf8.h"

namespace kvserve::model {
namespace {

constexpr uint32_t kReplacementChar = 0xFFFD;

CharGroup GroupOf(uint32_t cp) {
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharGroup::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharGroup::kNumber;
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return CharGroup::kPunctuation;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return CharGroup::kMark;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return CharGroup::kSymbol;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return CharGroup::kSeparator;
    default:
      return CharGroup::kOther;
  }
}

}  // namespace

std::vector<TextChar> ClassifyText(std::string_view text) {
  std::vector<TextChar> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = ScanUtf8(text.substr(i));
    TextChar c;
    c.offset = static_cast<uint32_t>(i);
    if (step.kind == Utf8Kind::kChar) {
      c.len = static_cast<uint8_t>(step.n);
      const uint32_t cp = DecodeUtf8Char(text.substr(i, step.n));
      c.group = GroupOf(cp);
      c.whitespace = u_isUWhiteSpace(static_cast<UChar32>(cp));
      c.cp = (cp > 0x7F && c.whitespace) ? 0x0B : cp;
    } else {
      c.len = 1;
      c.group = CharGroup::kSymbol;  // U+FFFD is So
      c.whitespace = false;
      c.cp = kReplacementChar;
    }
    out.push_back(c);
    i += c.len;
  }
  return out;
}

uint32_t ToLower(uint32_t cp) { return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp))); }

}  // namespace kvserve::model
