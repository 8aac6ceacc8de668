#include "model/tokenizer.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---------------------------------------------------------------------------
// Hand-built vocabularies: ids 0..2 are <unk>, <s>, </s>; 3..258 the bytes.

constexpr int32_t kFirstPiece = 259;

Vocabulary ByteVocab() {
  Vocabulary v;
  auto add = [&v](std::string piece, TokenKind kind) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(0.0f);
    v.kinds.push_back(kind);
  };
  add("<unk>", TokenKind::kUnknown);
  add("<s>", TokenKind::kControl);
  add("</s>", TokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    add(absl::StrCat("<0x", absl::Hex(b, absl::kZeroPad2), ">"), TokenKind::kByte);
  }
  return v;
}

// Appends normal pieces with their scores; piece i gets id kFirstPiece + i.
Vocabulary WithPieces(Vocabulary v, const std::vector<std::pair<std::string, float>>& pieces) {
  for (const auto& [piece, score] : pieces) {
    v.pieces.push_back(piece);
    v.scores.push_back(score);
    v.kinds.push_back(TokenKind::kNormal);
  }
  return v;
}

std::unique_ptr<Tokenizer> MustCreate(const Vocabulary& v) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(v);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

int32_t ByteId(uint8_t b) { return 3 + b; }

TEST(TokenizerCreate, RejectsMalformedVocabularies) {
  {
    Vocabulary v = ByteVocab();
    v.pieces[3 + 0x41] = "A";
    v.kinds[3 + 0x41] = TokenKind::kNormal;
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(v);
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tok.status().message(), HasSubstr("<0x41>"));
  }
  {
    Vocabulary v = ByteVocab();
    v.scores.pop_back();
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("scores"));
  }
  {
    Vocabulary v = ByteVocab();
    v.bos_id = v.size();
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("BOS id"));
  }
  {
    Vocabulary v = ByteVocab();
    v.eos_id = -1;
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("EOS id"));
  }
  {
    Vocabulary v = ByteVocab();
    v.unk_id = -2;
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("UNK id"));
  }
  {
    Vocabulary v = ByteVocab();
    v.scores[7] = std::nanf("");
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("NaN"));
  }
  {
    Vocabulary v = ByteVocab();
    v.pieces[10] = "<0xZZ>";
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("expected <0xNN>"));
  }
  {
    Vocabulary v = ByteVocab();
    v.pieces[10] = "<0x00>";
    EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("repeats <0x00>"));
  }
  EXPECT_FALSE(Tokenizer::Create(Vocabulary{}).ok());
  Vocabulary lower_case = ByteVocab();
  lower_case.pieces[3 + 0xAB] = "<0xab>";
  EXPECT_TRUE(Tokenizer::Create(lower_case).ok());
}

TEST(TokenizerEncode, HigherScoreMergesFirst) {
  // "bc" outscores "ab": "abc" -> a, bc.
  auto tok = MustCreate(
      WithPieces(ByteVocab(), {{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}}));
  ASSERT_NE(tok, nullptr);
  const int32_t a = kFirstPiece, c = kFirstPiece + 2, ab = kFirstPiece + 3, bc = kFirstPiece + 4;
  Vocabulary no_prefix = tok->vocab();
  EXPECT_THAT(tok->Encode("abc", false),
              ElementsAre(ByteId(0xE2), ByteId(0x96), ByteId(0x81), a, bc));
  no_prefix.add_space_prefix = false;
  auto tok2 = MustCreate(no_prefix);
  ASSERT_NE(tok2, nullptr);
  EXPECT_THAT(tok2->Encode("abc", false), ElementsAre(a, bc));
  EXPECT_THAT(tok2->Encode("abcab", false), ElementsAre(a, bc, ab));
  EXPECT_THAT(tok2->Encode("abcc", false), ElementsAre(a, bc, c));
}

TEST(TokenizerEncode, EqualScoresMergeLeftmostFirst) {
  Vocabulary v = WithPieces(ByteVocab(), {{"a", -10}, {"b", -10}, {"ab", -1}, {"ba", -1}});
  v.add_space_prefix = false;
  auto tok = MustCreate(v);
  ASSERT_NE(tok, nullptr);
  const int32_t a = kFirstPiece, ab = kFirstPiece + 2, ba = kFirstPiece + 3;
  EXPECT_THAT(tok->Encode("aba", false), ElementsAre(ab, a));
  EXPECT_THAT(tok->Encode("bab", false), ElementsAre(ba, kFirstPiece + 1));
}

TEST(TokenizerEncode, MergedSymbolsMergeFurther) {
  Vocabulary v = WithPieces(ByteVocab(), {{"\xE2\x96\x81", -9},
                                          {"t", -9},
                                          {"h", -9},
                                          {"e", -9},
                                          {"th", -1},
                                          {"the", -2},
                                          {"\xE2\x96\x81the", -3}});
  auto tok = MustCreate(v);
  ASSERT_NE(tok, nullptr);
  const int32_t space = kFirstPiece, space_the = kFirstPiece + 6;
  EXPECT_THAT(tok->Encode("the the", true), ElementsAre(1, space_the, space_the));
  EXPECT_THAT(tok->Encode("  the", false), ElementsAre(space, space, space_the));
  EXPECT_EQ(tok->Decode(tok->Encode("  the", true)), "  the");
}

TEST(TokenizerEncode, ControlAndByteTokensAreNeverProducedFromText) {
  // "<s" + ">" would form the control piece "<s>", "<0x" + "41>" a byte piece.
  Vocabulary v = WithPieces(ByteVocab(), {{"<", -9},
                                          {"s", -9},
                                          {">", -9},
                                          {"<s", -1},
                                          {"0", -9},
                                          {"x", -9},
                                          {"4", -9},
                                          {"1", -9},
                                          {"<0", -1},
                                          {"<0x", -1},
                                          {"41", -1},
                                          {"41>", -1}});
  v.add_space_prefix = false;
  auto tok = MustCreate(v);
  ASSERT_NE(tok, nullptr);
  const int32_t gt = kFirstPiece + 2, lt_s = kFirstPiece + 3;
  EXPECT_THAT(tok->Encode("<s>", false), ElementsAre(lt_s, gt));
  EXPECT_THAT(tok->Encode("<0x41>", false), ElementsAre(kFirstPiece + 9, kFirstPiece + 11));
  EXPECT_EQ(tok->Decode(tok->Encode("<s>", true)), "<s>");
}

TEST(TokenizerEncode, EmptyText) {
  auto tok = MustCreate(ByteVocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("", true), ElementsAre(1));
  EXPECT_THAT(tok->Encode("", false), IsEmpty());
  EXPECT_EQ(tok->Decode({}), "");
}

TEST(TokenizerEncode, IllFormedUtf8FallsBackToBytes) {
  Vocabulary v = WithPieces(ByteVocab(), {{"a", -1}, {"\xC3\xA9", -1}});
  v.add_space_prefix = false;
  auto tok = MustCreate(v);
  ASSERT_NE(tok, nullptr);
  const std::string text =
      "\xC3"
      "a\xC3\xA9\x80\xF0\x9F";
  EXPECT_THAT(tok->Encode(text, false), ElementsAre(ByteId(0xC3), kFirstPiece, kFirstPiece + 1,
                                                    ByteId(0x80), ByteId(0xF0), ByteId(0x9F)));
  // Decoding repairs: each maximal ill-formed subpart becomes one U+FFFD.
  EXPECT_EQ(tok->Decode(tok->Encode(text, false)),
            "\xEF\xBF\xBD"
            "a\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_THAT(tok->Encode(std::string(1, '\0'), false), ElementsAre(ByteId(0)));
}

TEST(TokenizerDecode, KindsAndSpaceAfterBos) {
  Vocabulary v = WithPieces(ByteVocab(), {{"\xE2\x96\x81hi", -1}, {"x\xE2\x96\x81y", -1}});
  v.pieces.push_back("<user>");
  v.scores.push_back(0);
  v.kinds.push_back(TokenKind::kUserDefined);
  v.pieces.push_back("<unused>");
  v.scores.push_back(0);
  v.kinds.push_back(TokenKind::kUnused);
  auto tok = MustCreate(v);
  ASSERT_NE(tok, nullptr);
  const int32_t hi = kFirstPiece, xy = kFirstPiece + 1, user = kFirstPiece + 2,
                unused = kFirstPiece + 3;
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, hi, hi}), "hi hi");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{hi, hi}), " hi hi");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{0, 1, 2, unused, xy, user}), "x y<user>");
  // A byte-token space after BOS is kept (as in llama2.c).
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, ByteId(' '), hi}), "  hi");
  // Out-of-range ids are skipped and do not count as the previous token.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, -5, v.size(), hi}), "hi");
  absl::StatusOr<std::string> checked = tok->DecodeChecked(std::vector<int32_t>{1, hi, v.size()});
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checked.status().message(), HasSubstr("at index 2"));
  EXPECT_EQ(*tok->DecodeChecked(std::vector<int32_t>{1, hi}), "hi");

  Vocabulary no_prefix = v;
  no_prefix.add_space_prefix = false;
  auto tok2 = MustCreate(no_prefix);
  ASSERT_NE(tok2, nullptr);
  EXPECT_EQ(tok2->Decode(std::vector<int32_t>{1, hi}), " hi");
}

TEST(TokenStreamDecoder, HoldsBackIncompleteCharacters) {
  auto tok = MustCreate(ByteVocab());
  ASSERT_NE(tok, nullptr);
  TokenStreamDecoder dec(*tok);
  // U+1F642 🙂 = F0 9F 99 82, fed one byte token at a time.
  EXPECT_EQ(dec.Push(ByteId(0xF0)), "");
  EXPECT_EQ(dec.Push(ByteId(0x9F)), "");
  EXPECT_EQ(dec.Push(ByteId(0x99)), "");
  EXPECT_EQ(dec.Push(ByteId(0x82)), "\xF0\x9F\x99\x82");
  EXPECT_EQ(dec.Push(ByteId('!')), "!");
  // A character cut short by an ASCII byte: U+FFFD for the prefix, then the byte.
  EXPECT_EQ(dec.Push(ByteId(0xE4)), "");
  EXPECT_EQ(dec.Push(ByteId('a')),
            "\xEF\xBF\xBD"
            "a");
  // Pending bytes at the end come out of Flush as U+FFFD.
  EXPECT_EQ(dec.Push(ByteId(0xE4)), "");
  EXPECT_EQ(dec.Push(ByteId(0xB8)), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Flush(), "");
  EXPECT_EQ(dec.Push(-1), "");
}

// ---------------------------------------------------------------------------
// The stories260K vocabulary, from the GGUF file and from llama2.c's tok512.bin.

std::string ModelsDir() {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  return dir != nullptr ? dir : "models";
}

struct Golden {
  std::string text;
  std::vector<int32_t> ids;  // with BOS
};

// Produced with the peers built from ggerganov/llama.cpp c392e5094dea and
// karpathy/llama2.c 350e04fe3543, the text written byte-exact to FILE:
//   llama-tokenize -m models/stories260K.gguf -f FILE --ids --no-parse-special --no-escape
// and llama2.c's run.c encode(tokenizer=tok512.bin, bos=1, eos=0) on the same bytes; the two
// agreed on every line.
const std::vector<Golden>& GoldenEncodings() {
  static const auto* const kGolden = new std::vector<Golden>{
      {"Once upon a time", {1, 403, 407, 261, 378}},
      {"Hello, world! How are you?",
       {1, 346, 306, 414, 432, 263, 304, 341, 443, 320, 327, 261, 276, 364, 450}},
      {"The year 2024 had 365 days; pi is 3.14159.",
       {1,   291, 348, 411, 295, 410, 479, 477, 479, 484, 381, 410, 472, 490, 480, 328,
        419, 474, 282, 417, 410, 293, 410, 472, 426, 475, 484, 475, 480, 483, 426}},
      {"line one\nline two\n\nend\n",
       {1, 278, 271, 411, 353, 411, 13, 421, 271, 411, 259, 424, 414, 13, 13, 367, 13}},
      {"a  b   c    d", {1, 261, 410, 268, 410, 410, 280, 410, 410, 410, 279}},
      {"  leading and trailing  ",
       {1, 410, 410, 278, 411, 380, 299, 269, 259, 420, 412, 290, 299, 410, 410}},
      {" ", {1, 410, 410}},
      {"中华人民", {1, 410, 231, 187, 176, 232, 144, 145, 231, 189, 189, 233, 179, 148}},
      {"café é", {1, 280, 412, 431, 485, 410, 485}},
      {"smile 🙂!", {1, 262, 423, 290, 411, 410, 243, 162, 156, 133, 443}},
      {"<s>hello</s>", {1, 410, 504, 419, 505, 260, 306, 414, 504, 492, 419, 505}},
      {"", {1}},
      {"\ttab\r\n", {1, 410, 12, 413, 412, 430, 16, 13}},
      {"Lily and Tom went to the park. They saw a big dog!",
       {1,   317, 269, 274, 287, 263, 377, 267, 265, 282,
        295, 433, 426, 342, 394, 261, 370, 400, 428, 443}},
      {"unbelievable supercalifragilistic",
       {1,   318, 416, 430, 411, 421, 417, 411, 435, 412, 430, 305, 262, 425, 427,
        285, 429, 412, 421, 417, 431, 420, 412, 428, 290, 293, 413, 417, 429}},
      {"\"Quotes\" (parens) [brackets] {braces} #hash @at $100 & 50% *star* a+b=c ~tilde` "
       "^caret | pipe \\ back/slash",
       {1,   313, 473, 425, 309, 406, 436, 410, 489, 427, 412, 276, 416, 419, 488, 410,
        508, 430, 420, 412, 340, 316, 419, 509, 410, 126, 430, 420, 412, 331, 419, 128,
        410, 38,  415, 412, 419, 415, 410, 67,  294, 410, 494, 475, 477, 477, 410, 499,
        410, 480, 477, 501, 410, 497, 356, 295, 497, 261, 496, 430, 64,  429, 410, 510,
        413, 290, 418, 411, 495, 410, 97,  429, 412, 276, 413, 410, 506, 282, 417, 427,
        411, 410, 500, 268, 412, 340, 492, 419, 421, 412, 419, 415}},
      {"Ünïcödé ñ ß 日本語 한국어 Ελληνικά кириллица",
       {1,   410, 198, 159, 416, 198, 178, 429, 198, 185, 418, 485, 410, 493, 410,
        198, 162, 410, 233, 154, 168, 233, 159, 175, 235, 173, 161, 410, 240, 152,
        159, 237, 184, 176, 239, 153, 183, 410, 209, 152, 209, 190, 209, 190, 209,
        186, 209, 192, 209, 188, 209, 189, 209, 175, 410, 211, 189, 211, 187, 212,
        131, 211, 187, 211, 190, 211, 190, 211, 187, 212, 137, 211, 179}},
  };
  return *kGolden;
}

// Appends the UTF-8 encoding of code point `cp` (an independent encoder for the tests).
void AppendCodePoint(uint32_t cp, std::string& out) {
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

// Decodes well-formed UTF-8 back into code points; false on any ill-formed input.
bool DecodeUtf8(const std::string& s, std::vector<uint32_t>* cps) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    cps->push_back(cp);
    i += n;
  }
  return true;
}

std::string RandomValidText(std::mt19937& rng, int n_chars) {
  std::string s;
  for (int i = 0; i < n_chars; ++i) {
    uint32_t cp = 0;
    switch (rng() % 6) {
      case 0:
        cp = ' ';
        break;
      case 1:
        cp = "\n\t.,!?'\"0123456789"[rng() % 18];
        break;
      case 2:
        cp = 0x80 + rng() % (0x800 - 0x80);
        break;
      case 3:
        cp = 0x800 + rng() % (0x10000 - 0x800);
        break;
      case 4:
        cp = 0x10000 + rng() % (0x110000 - 0x10000);
        break;
      default:
        cp = 'a' + rng() % 26;
        break;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581) cp = 'x';  // no surrogates, no "▁"
    AppendCodePoint(cp, s);
  }
  return s;
}

class StoriesTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = ModelsDir();
    absl::StatusOr<std::unique_ptr<Model>> model =
        GetParam() == "gguf" ? Model::Load(dir + "/stories260K.gguf")
                             : Model::Load(dir + "/stories260K.bin", dir + "/tok512.bin");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(model_->vocab());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(StoriesTokenizerTest, EncodingsEqualLlamaCppAndLlama2c) {
  for (const Golden& g : GoldenEncodings()) {
    EXPECT_EQ(tok_->Encode(g.text, true), g.ids) << "text: \"" << g.text << "\"";
    std::vector<int32_t> no_bos(g.ids.begin() + 1, g.ids.end());
    EXPECT_EQ(tok_->Encode(g.text, false), no_bos) << "text: \"" << g.text << "\"";
    EXPECT_EQ(tok_->Decode(g.ids), g.text);
  }
}

TEST_P(StoriesTokenizerTest, RoundTripsRandomValidUtf8) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string text = RandomValidText(rng, 1 + static_cast<int>(rng() % 40));
    EXPECT_EQ(tok_->Decode(tok_->Encode(text, true)), text);
  }
}

TEST_P(StoriesTokenizerTest, RandomBytesRoundTripAsRepairedUtf8) {
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 32, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::string decoded = tok_->Decode(tok_->Encode(bytes, true));
    std::vector<uint32_t> cps;
    ASSERT_TRUE(DecodeUtf8(decoded, &cps)) << "decode produced ill-formed UTF-8";
    // Well-formed parts come back unchanged: a valid input without "▁" round-trips,
    // and decoding the result again is stable.
    EXPECT_EQ(tok_->Decode(tok_->Encode(decoded, true)), decoded);
    std::vector<uint32_t> in_cps;
    if (DecodeUtf8(bytes, &in_cps)) {
      EXPECT_EQ(decoded, bytes);
    }
  }
}

TEST_P(StoriesTokenizerTest, StreamingEqualsFullDecodeAndNeverSplitsCharacters) {
  const Vocabulary& v = tok_->vocab();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      // Mostly byte tokens (to split characters), some pieces, BOS, and junk ids.
      const uint32_t r = rng() % 10;
      ids.push_back(r < 5   ? 3 + static_cast<int32_t>(0x80 + rng() % 0x80)
                    : r < 8 ? static_cast<int32_t>(rng() % v.size())
                    : r < 9 ? v.bos_id
                            : static_cast<int32_t>(rng() % 2 ? -1 : v.size() + 3));
    }
    TokenStreamDecoder dec(*tok_);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = dec.Push(id);
      std::vector<uint32_t> cps;
      EXPECT_TRUE(DecodeUtf8(part, &cps)) << "Push emitted part of a character";
      streamed += part;
    }
    streamed += dec.Flush();
    EXPECT_EQ(streamed, tok_->Decode(ids));
  }
}

TEST_P(StoriesTokenizerTest, StreamingDropsTheSpaceAfterBos) {
  const std::vector<int32_t> ids = tok_->Encode("Once upon a time 🙂", true);
  TokenStreamDecoder dec(*tok_, /*prev_token=*/ids[0]);
  std::string streamed;
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string part = dec.Push(ids[i]);
    // The emoji's four byte tokens come out only with the last one.
    if (i + 1 < ids.size() && i + 4 >= ids.size()) {
      EXPECT_EQ(part, "") << i;
    }
    streamed += part;
  }
  EXPECT_EQ(streamed, "Once upon a time 🙂");
  EXPECT_EQ(dec.Flush(), "");
}

// A 4k-token prompt: must stay far from quadratic. Timing is only printed (the
// suite also runs under sanitizers); the expectation is on the result.
TEST_P(StoriesTokenizerTest, LongPromptEncodes) {
  std::string text;
  while (text.size() < 16000) text += "Lily and Tom went to the park. They saw a big dog! ";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok_->Encode(text, true);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  std::printf("encoded %zu bytes into %zu tokens in %lld us\n", text.size(), ids.size(),
              static_cast<long long>(us));
  EXPECT_GT(ids.size(), 4000u);
  EXPECT_EQ(tok_->Decode(ids), text);
}

INSTANTIATE_TEST_SUITE_P(Files, StoriesTokenizerTest, ::testing::Values("gguf", "llama2c"));

}  // namespace
}  // namespace kvserve::model
