#include "model/pre_tokenizer.h"

#include <span>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

using Step = PreTokenizeStep;

constexpr uint8_t Bit(CharGroup g) { return static_cast<uint8_t>(1u << static_cast<int>(g)); }

bool IsLetter(const TextChar& c) { return c.group == CharGroup::kLetter; }
bool IsNumber(const TextChar& c) { return c.group == CharGroup::kNumber; }
// [^\s\p{L}\p{N}]
bool IsOther(const TextChar& c) { return !c.whitespace && !IsLetter(c) && !IsNumber(c); }
bool IsNewline(const TextChar& c) { return c.cp == '\r' || c.cp == '\n'; }

// `ranges` in regex class syntax without escapes: "a-zA-Z_" (UTF-32 so that every
// code point is one element).
std::vector<std::pair<uint32_t, uint32_t>> ParseRanges(std::u32string_view ranges) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (size_t i = 0; i < ranges.size();) {
    if (i + 2 < ranges.size() && ranges[i + 1] == U'-') {
      out.emplace_back(ranges[i], ranges[i + 2]);
      i += 3;
    } else {
      out.emplace_back(ranges[i], ranges[i]);
      ++i;
    }
  }
  return out;
}

CharClass Class(uint8_t groups, bool whitespace, std::u32string_view ranges) {
  return CharClass{groups, whitespace, ParseRanges(ranges), false};
}

Step ClassStep(CharClass cls, Step::Repeat repeat, bool optional_whitespace_prefix = false) {
  Step s{Step::Kind::kClass};
  s.cls = std::move(cls);
  s.repeat = repeat;
  s.optional_whitespace_prefix = optional_whitespace_prefix;
  return s;
}

Step Gpt2Step() { return Step{Step::Kind::kGpt2}; }
Step Llama3Step(int max_digits) {
  Step s{Step::Kind::kLlama3};
  s.max_digits = max_digits;
  return s;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d), or case-sensitive for GPT-2. Length or 0.
size_t MatchContraction(std::span<const TextChar> w, size_t p, bool ignore_case) {
  if (w[p].cp != '\'' || p + 1 >= w.size()) return 0;
  auto at = [&](size_t i) { return ignore_case ? ToLower(w[i].cp) : w[i].cp; };
  const uint32_t a = at(p + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (p + 2 >= w.size()) return 0;
  const uint32_t b = at(p + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// "<prefix>?<cls>+" where the optional prefix is one character satisfying `prefix`
// (greedy, as a regex tries it first). Length or 0.
template <typename Prefix, typename Cls>
size_t MatchPrefixedRun(std::span<const TextChar> w, size_t p, Prefix prefix, Cls cls) {
  size_t q = p;
  if (prefix(w[p]) && p + 1 < w.size() && cls(w[p + 1])) {
    q = p + 1;
  } else if (!cls(w[p])) {
    return 0;
  }
  while (q < w.size() && cls(w[q])) ++q;
  return q - p;
}

// \s+(?!\S)|\s+ at a whitespace character: the run, less its last character when a
// non-whitespace character follows a run of two or more.
size_t MatchWhitespace(std::span<const TextChar> w, size_t p) {
  size_t q = p;
  while (q < w.size() && w[q].whitespace) ++q;
  const size_t run = q - p;
  return (q < w.size() && run > 1) ? run - 1 : run;
}

bool IsSpace(const TextChar& c) { return c.cp == ' '; }

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The alternatives cover every character, so a match starts at every position.
size_t MatchGpt2(std::span<const TextChar> w, size_t p) {
  if (size_t n = MatchContraction(w, p, /*ignore_case=*/false)) return n;
  if (size_t n = MatchPrefixedRun(w, p, IsSpace, IsLetter)) return n;
  if (size_t n = MatchPrefixedRun(w, p, IsSpace, IsNumber)) return n;
  if (size_t n = MatchPrefixedRun(w, p, IsSpace, IsOther)) return n;
  return MatchWhitespace(w, p);  // w[p] is whitespace here
}

// Llama 3: (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
size_t MatchLlama3(std::span<const TextChar> w, size_t p, int max_digits) {
  if (size_t n = MatchContraction(w, p, /*ignore_case=*/true)) return n;
  auto letter_prefix = [](const TextChar& c) {
    return !IsNewline(c) && !IsLetter(c) && !IsNumber(c);
  };
  if (size_t n = MatchPrefixedRun(w, p, letter_prefix, IsLetter)) return n;
  if (IsNumber(w[p])) {
    size_t q = p;
    while (q < w.size() && IsNumber(w[q]) && q - p < static_cast<size_t>(max_digits)) ++q;
    return q - p;
  }
  if (size_t n = MatchPrefixedRun(w, p, IsSpace, IsOther)) {
    size_t q = p + n;
    while (q < w.size() && IsNewline(w[q])) ++q;
    return q - p;
  }
  // \s*[\r\n]+: the whitespace run up to its last \r or \n.
  size_t last_newline_end = 0;
  for (size_t q = p; q < w.size() && w[q].whitespace; ++q) {
    if (IsNewline(w[q])) last_newline_end = q + 1;
  }
  if (last_newline_end > 0) return last_newline_end - p;
  return MatchWhitespace(w, p);
}

// A kClass step at p: length or 0.
size_t MatchClass(const Step& s, std::span<const TextChar> w, size_t p) {
  if (s.repeat == Step::Repeat::kThree) {
    if (p + 3 > w.size()) return 0;
    for (size_t i = p; i < p + 3; ++i) {
      if (!s.cls.Matches(w[i])) return 0;
    }
    return 3;
  }
  size_t q = p;
  if (s.optional_whitespace_prefix && w[p].whitespace && p + 1 < w.size() &&
      s.cls.Matches(w[p + 1])) {
    q = p + 1;
  } else if (!s.cls.Matches(w[p])) {
    return 0;
  }
  ++q;
  if (s.repeat == Step::Repeat::kOneOrMore) {
    while (q < w.size() && s.cls.Matches(w[q])) ++q;
  }
  return q - p;
}

// Splits word `w` by step `s`; appends the lengths (in characters) of the parts.
void SplitWord(const Step& s, std::span<const TextChar> w, std::vector<uint32_t>& parts) {
  if (s.kind == Step::Kind::kTrailingWhitespace) {
    size_t t = w.size();
    while (t > 0 && w[t - 1].whitespace) --t;
    if (t > 0) parts.push_back(static_cast<uint32_t>(t));
    if (t < w.size()) parts.push_back(static_cast<uint32_t>(w.size() - t));
    return;
  }
  size_t gap_start = 0;
  for (size_t p = 0; p < w.size();) {
    size_t n = 0;
    switch (s.kind) {
      case Step::Kind::kGpt2:
        n = MatchGpt2(w, p);
        break;
      case Step::Kind::kLlama3:
        n = MatchLlama3(w, p, s.max_digits);
        break;
      default:
        n = MatchClass(s, w, p);
        break;
    }
    if (n == 0) {
      ++p;
      continue;
    }
    if (p > gap_start) parts.push_back(static_cast<uint32_t>(p - gap_start));
    parts.push_back(static_cast<uint32_t>(n));
    p += n;
    gap_start = p;
  }
  if (w.size() > gap_start) parts.push_back(static_cast<uint32_t>(w.size() - gap_start));
}

// Han ideographs, the blocks from Samaritan to CJK, and Hangul, as DeepSeek's
// tokenizer.json writes them.
constexpr std::u32string_view kDeepseekCjk = U"一-龥ࠀ-一가-퟿";

// True when every "a-b" in `ranges` has a <= b. A reversed range matches nothing, so a
// class that has one was mangled (see kDeepseekLetters).
constexpr bool RangesAreOrdered(std::u32string_view ranges) {
  for (size_t i = 0; i + 2 < ranges.size(); ++i) {
    if (ranges[i + 1] == U'-' && ranges[i] > ranges[i + 2]) return false;
  }
  return true;
}

// DeepSeek LLM's letter class, code point for code point as in its tokenizer.json and in
// llama.cpp (LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM). Six of its characters are canonical
// equivalents of others, which Unicode normalization (NFC, as some editors and tools
// apply to source files) substitutes, changing the class; they are written as escapes
// so that it cannot:
//   U+212A KELVIN SIGN starts the range "\u212A-ℭ". As U+004B 'K' the range would be
//     U+004B..U+212D: ASCII K-Z [\]^_` a-z {|}~, Latin-1, Greek to Thai, and ‘’“” would
//     all count as letters, so "x|>y" would split as "x|" ">" "y" where llama.cpp has
//     "x" "|>" "y", and "it’s" would stay one word where llama.cpp has three.
//   U+1F7D, U+1FD3, U+1FDB end "Ὗ-\u1F7D", "ῐ-\u1FD3", "ῖ-\u1FDB"; normalized (U+03CE,
//     U+0390, U+038A) they would reverse those ranges (RangesAreOrdered).
//   U+2126 OHM SIGN and U+1FBE GREEK PROSGEGRAMMENI (normalized: U+03A9, U+03B9).
// clang-format off (it cannot measure these characters and reflows them)
constexpr std::u32string_view kDeepseekLetters =
    U"A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷ"
    U"ͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽ"
    U"ᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅ"
    U"ὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDB"
    U"ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹ"
    U"ℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯ"
    U"ꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻"
    U"𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃";
// clang-format on
static_assert(RangesAreOrdered(kDeepseekLetters));
static_assert(RangesAreOrdered(kDeepseekCjk));

std::vector<Step> DeepseekLlmSteps() {
  return {
      ClassStep(Class(0, false, U"\r\n"), Step::Repeat::kOnce),
      ClassStep(Class(0, false, kDeepseekLetters), Step::Repeat::kOneOrMore, true),
      ClassStep(Class(0, false, U"!-/:-~！-／：-～‘-‟　-。"), Step::Repeat::kOneOrMore, true),
      Step{Step::Kind::kTrailingWhitespace},
      ClassStep(Class(0, false, kDeepseekCjk), Step::Repeat::kOneOrMore),
      ClassStep(Class(Bit(CharGroup::kNumber), false, U""), Step::Repeat::kOneOrMore),
  };
}

std::vector<Step> DeepseekCoderSteps() {
  return {
      ClassStep(Class(0, false, U"\r\n"), Step::Repeat::kOnce),
      ClassStep(Class(Bit(CharGroup::kLetter), false, U""), Step::Repeat::kOneOrMore, true),
      ClassStep(Class(Bit(CharGroup::kPunctuation), false, U""), Step::Repeat::kOneOrMore, true),
      ClassStep(Class(0, false, kDeepseekCjk), Step::Repeat::kOneOrMore),
      ClassStep(Class(Bit(CharGroup::kNumber), false, U""), Step::Repeat::kOnce),
  };
}

// [\p{P}\$\+<=>\^~\|]+ (Falcon and the default).
Step PunctuationRunStep() {
  return ClassStep(Class(Bit(CharGroup::kPunctuation), false, U"$+<=>^~|"),
                   Step::Repeat::kOneOrMore);
}
Step ThreeDigitsStep() { return ClassStep(Class(0, false, U"0-9"), Step::Repeat::kThree); }

}  // namespace

bool CharClass::Matches(const TextChar& c) const {
  bool m = (groups & Bit(c.group)) != 0 || (whitespace && c.whitespace);
  for (size_t i = 0; !m && i < ranges.size(); ++i) {
    m = ranges[i].first <= c.cp && c.cp <= ranges[i].second;
  }
  return m != negated;
}

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  const std::string n(name);
  if (n == "llama-bpe" || n == "llama3" || n == "llama-v3") {
    return PreTokenizer(n, {Llama3Step(3)}, /*ignore_merges=*/true);
  }
  if (n == "qwen2" || n == "deepseek-r1-qwen") return PreTokenizer(n, {Llama3Step(1)}, false);
  if (n == "gpt-2" || n == "mpt") return PreTokenizer(n, {Gpt2Step()}, false);
  if (n == "starcoder" || n == "refact") {
    return PreTokenizer(
        n, {ClassStep(Class(Bit(CharGroup::kNumber), false, U""), Step::Repeat::kOnce), Gpt2Step()},
        false);
  }
  if (n == "falcon") {
    return PreTokenizer(n, {PunctuationRunStep(), Gpt2Step(), ThreeDigitsStep()}, false);
  }
  if (n == "default") {
    return PreTokenizer(
        n,
        {PunctuationRunStep(), Gpt2Step(),
         ClassStep(Class(Bit(CharGroup::kNumber), false, U""), Step::Repeat::kOneOrMore),
         ThreeDigitsStep()},
        false);
  }
  if (n == "deepseek-llm") return PreTokenizer(n, DeepseekLlmSteps(), false);
  if (n == "deepseek-coder") return PreTokenizer(n, DeepseekCoderSteps(), false);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown pre-tokenizer \"", n,
      "\" (tokenizer.ggml.pre); supported: llama-bpe, llama3, llama-v3, qwen2, "
      "deepseek-r1-qwen, gpt-2, mpt, starcoder, refact, falcon, default, deepseek-llm, "
      "deepseek-coder"));
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  const std::vector<TextChar> chars = ClassifyText(text);
  // Word boundaries as character counts; each step refines them.
  std::vector<uint32_t> parts = {static_cast<uint32_t>(chars.size())};
  std::vector<uint32_t> next;
  for (const Step& step : steps_) {
    next.clear();
    size_t start = 0;
    for (uint32_t len : parts) {
      SplitWord(step, std::span<const TextChar>(chars).subspan(start, len), next);
      start += len;
    }
    parts.swap(next);
  }
  size_t start = 0;
  for (uint32_t len : parts) {
    const size_t begin = chars[start].offset;
    const size_t end = start + len < chars.size() ? chars[start + len].offset : text.size();
    words.push_back(text.substr(begin, end - begin));
    start += len;
  }
}

}  // namespace kvserve::model
