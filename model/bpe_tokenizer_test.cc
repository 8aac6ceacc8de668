// Byte-level BPE and its pre-tokenizers on a synthetic vocabulary (no model file):
// hand-checked word splits for each regex family, merges by rank, special tokens.
// model/vocab_conformance_test.cc checks real vocabularies against llama.cpp.
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/pre_tokenizer.h"
#include "model/testing/synthetic_bpe_vocabulary.h"
#include "model/tokenizer.h"

namespace kvserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Words(std::string_view pre, std::string_view text) {
  absl::StatusOr<PreTokenizer> p = PreTokenizer::Create(pre);
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<std::string_view> views;
  p->Split(text, views);
  return std::vector<std::string>(views.begin(), views.end());
}

TEST(PreTokenizerTest, Gpt2SplitsContractionsLettersNumbersAndWhitespace) {
  EXPECT_THAT(Words("gpt-2", "Hello world's 12ab  !!\n x"),
              ElementsAre("Hello", " world", "'s", " 12", "ab", " ", " !!", "\n", " x"));
}

TEST(PreTokenizerTest, Llama3GroupsThreeDigitsAndIgnoresCaseOfContractions) {
  EXPECT_THAT(Words("llama-bpe", "I'VE 12345 a\n\n b"),
              ElementsAre("I", "'VE", " ", "123", "45", " a", "\n\n", " b"));
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_THAT(Words("qwen2", "x 123"), ElementsAre("x", " ", "1", "2", "3"));
}

TEST(PreTokenizerTest, StarcoderSplitsDigitsBeforeGpt2) {
  EXPECT_THAT(Words("starcoder", "ab12 c"), ElementsAre("ab", "1", "2", " c"));
}

TEST(PreTokenizerTest, FalconGroupsPunctuationAndThreeDigits) {
  // [0-9][0-9][0-9] then cuts GPT-2's " 12345" at its first three digits.
  EXPECT_THAT(Words("falcon", "a+=b 12345"), ElementsAre("a", "+=", "b", " ", "123", "45"));
}

TEST(PreTokenizerTest, DeepseekCoderSplitsCjkAndSingleDigits) {
  EXPECT_THAT(Words("deepseek-coder", "ab 中文12"), ElementsAre("ab", " ", "中文", "1", "2"));
}

TEST(PreTokenizerTest, DeepseekLlmLettersAreItsListNotAsciiPunctuation) {
  // Its letter class has "\u212A-ℭ" (from KELVIN SIGN, not 'K'): '|', '_' and '’' are
  // not letters; the Kelvin and Ohm signs and U+1F7D (ώ with oxia) are.
  EXPECT_THAT(Words("deepseek-llm", "x|>word a_b"), ElementsAre("x", "|>", "word", " a", "_", "b"));
  EXPECT_THAT(Words("deepseek-llm", "\u212A\u2126\u1F7D it\u2019s"),
              ElementsAre("\u212A\u2126\u1F7D", " it", "\u2019", "s"));
}

TEST(PreTokenizerTest, UnicodeLettersComeFromIcu) {
  // Cyrillic and Greek letters are \p{L}; U+3000 (ideographic space) is \s.
  EXPECT_THAT(Words("gpt-2", "мир κόσμος\xE3\x80\x80x"),
              ElementsAre("мир", " κόσμος", "\xE3\x80\x80", "x"));
}

TEST(PreTokenizerTest, IllFormedBytesStayInTheWords) {
  EXPECT_THAT(Words("gpt-2", "a\xFF\xFE b"), ElementsAre("a", "\xFF\xFE", " b"));
}

TEST(PreTokenizerTest, UnknownNameIsAnErrorNamingIt) {
  absl::StatusOr<PreTokenizer> p = PreTokenizer::Create("gpt-5");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("\"gpt-5\""));
}

class BpeTokenizerTest : public ::testing::Test {
 protected:
  int32_t Id(std::string_view piece) const {
    for (int32_t id = 0; id < tok_->vocab().size(); ++id) {
      if (tok_->vocab().pieces[id] == piece) return id;
    }
    ADD_FAILURE() << "no token " << piece;
    return -1;
  }
  std::unique_ptr<Tokenizer> tok_ = MakeSyntheticBpeTokenizer("gpt-2");
};

TEST_F(BpeTokenizerTest, MergesByRankWithinWords) {
  // "hello": h e -> he, l l -> ll, he ll -> hell, hell o -> hello.
  EXPECT_THAT(tok_->Encode("hello the", false), ElementsAre(Id("hello"), Id("Ġthe")));
  // "xy" is a rule without a result token: x and y stay apart.
  EXPECT_THAT(tok_->Encode("xy", false), ElementsAre(Id("x"), Id("y")));
  // Numbers: 1 2 -> 12, 12 3 -> 123.
  EXPECT_THAT(tok_->Encode("1234", false), ElementsAre(Id("123"), Id("4")));
}

TEST_F(BpeTokenizerTest, BosFromTheVocabularyAndRoundTrip) {
  const std::string text = "héllo wörld 中文 🙂\t\n  x";
  const std::vector<int32_t> ids = tok_->Encode(text, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], tok_->vocab().bos_id);
  EXPECT_EQ(tok_->Decode(ids), text);
}

TEST_F(BpeTokenizerTest, ControlTokensOnlyWithParseSpecialUserDefinedAlways) {
  const int32_t end = Id("<|end|>");
  const int32_t user = Id("<user>");
  const std::vector<int32_t> plain = tok_->Encode("a<|end|>b<user>c", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), user), 1);
  EXPECT_EQ(tok_->Decode(plain), "a<|end|>b<user>c");
  EXPECT_THAT(tok_->Encode("a<|end|>b<user>c", false, /*parse_special=*/true),
              ElementsAre(Id("a"), end, Id("b"), user, Id("c")));
}

TEST(BpeVocabularyTest, MissingMergesOrUnknownPreTokenizerAreErrors) {
  Vocabulary v = MakeSyntheticBpeVocabulary("gpt-2");
  v.merges.clear();
  EXPECT_THAT(std::string(Tokenizer::Create(v).status().message()), HasSubstr("no merges"));
  v = MakeSyntheticBpeVocabulary("gpt-2");
  v.pre_tokenizer = "nope";
  EXPECT_THAT(std::string(Tokenizer::Create(v).status().message()), HasSubstr("\"nope\""));
}

}  // namespace
}  // namespace kvserve::model
