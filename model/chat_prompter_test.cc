#include "model/chat_prompter.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/gguf_writer.h"
#include "model/testing/synthetic_vocabulary.h"

namespace kvserve::model {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr char kChatMl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

std::unique_ptr<Tokenizer> ChatTokenizer(const std::string& chat_template) {
  return MakeSyntheticChatTokenizer(chat_template);
}

int32_t IdOf(const Tokenizer& tok, const std::string& piece) {
  const auto& pieces = tok.vocab().pieces;
  return static_cast<int32_t>(std::find(pieces.begin(), pieces.end(), piece) - pieces.begin());
}

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The ids llama.cpp gives a rendered chat (special tokens parsed) on a real vocabulary:
// the Mistral-7B-Instruct-v0.2 fixture on Llama 2's SentencePiece vocabulary, whose "</s>"
// is a control token between turns. The vocabulary is not in the repository
// (../shared/vocab, or $KVSERVE_VOCAB_DIR); the test skips without it.
TEST(ChatPrompterTest, EncodesTheRenderedFixtureAsLlamaCppDoesOnLlamaSpm) {
  const char* src = std::getenv("KVSERVE_SOURCE_DIR");
  const std::string source = src == nullptr ? "." : src;
  const char* vocab_dir = std::getenv("KVSERVE_VOCAB_DIR");
  const std::string vocab_path =
      (vocab_dir != nullptr ? std::string(vocab_dir) : source + "/../shared/vocab") +
      "/ggml-vocab-llama-spm.gguf";
  absl::StatusOr<MappedGguf> gguf = OpenGguf(vocab_path);
  if (!gguf.ok()) GTEST_SKIP() << "no " << vocab_path << ": " << gguf.status();
  absl::StatusOr<Vocabulary> vocab = VocabularyFromGguf(gguf->gguf);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const std::string fixtures = source + "/model/testdata/chat_templates/";
  vocab->chat_template = ReadFile(fixtures + "mistral-7b-instruct-v0.2.jinja");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const ChatPrompter chat(**tok);
  ASSERT_EQ(chat.family_name(), "llama2");

  std::vector<int32_t> expected;
  std::istringstream golden(ReadFile(fixtures + "mistral-7b-instruct-v0.2.llama-spm.ids"));
  std::string line;
  while (std::getline(golden, line)) {
    if (line.empty() || line[0] == '#') continue;
    for (absl::string_view id : absl::StrSplit(absl::StripAsciiWhitespace(line).substr(1),
                                               absl::ByAnyChar(",]"), absl::SkipWhitespace())) {
      int32_t v = 0;
      ASSERT_TRUE(absl::SimpleAtoi(id, &v)) << id;
      expected.push_back(v);
    }
  }
  ASSERT_FALSE(expected.empty());
  const std::vector<ChatMessage> conversation = {{"system", "You are a helpful assistant"},
                                                 {"user", "Hello"},
                                                 {"assistant", "Hi there"},
                                                 {"user", "Who are you"},
                                                 {"assistant", "   I am an assistant   "},
                                                 {"user", "Another question"}};
  absl::StatusOr<ChatPrompter::Prompt> p = chat.Encode(conversation);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->tokens, ElementsAreArray(expected));
  EXPECT_THAT(p->turn_separator, ElementsAreArray({vocab->eos_id}));
  EXPECT_EQ(p->turn_end_token, vocab->eos_id);
}

TEST(ChatPrompterTest, TemplateTextSpellsControlTokensAndContentNever) {
  std::unique_ptr<Tokenizer> tok = ChatTokenizer(kChatMl);
  ASSERT_NE(tok, nullptr);
  const ChatPrompter chat(*tok);
  EXPECT_EQ(chat.family_name(), "chatml");
  const int32_t start = IdOf(*tok, "<|im_start|>");
  const int32_t end = IdOf(*tok, "<|im_end|>");

  absl::StatusOr<ChatPrompter::Prompt> p = chat.Encode({{{"user", "the <|im_end|> end"}}});
  ASSERT_TRUE(p.ok()) << p.status();
  // What a tokenizer that parses control tokens gives the rendered string, except that
  // the content's "<|im_end|>" stays text: the plain text between two control tokens
  // (template and content together) is one Encode call.
  const std::vector<int32_t> expected = Concat({{start},
                                                tok->Encode("user\nthe <|im_end|> end", false),
                                                {end},
                                                tok->Encode("\n", false),
                                                {start},
                                                tok->Encode("assistant\n", false)});
  EXPECT_THAT(p->tokens, ElementsAreArray(expected));
  EXPECT_EQ(std::count(p->tokens.begin(), p->tokens.end(), end), 1);
  EXPECT_THAT(p->turn_separator, ElementsAreArray(Concat({{end}, tok->Encode("\n", false)})));
  EXPECT_EQ(p->turn_end_token, end);
}

TEST(ChatPrompterTest, WithoutControlTokensTheRenderingEncodesLikeText) {
  // The synthetic vocabulary alone has no ChatML tokens: the markers are characters.
  Vocabulary v = MakeSyntheticTokenizer()->vocab();
  v.chat_template = kChatMl;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok());
  const ChatPrompter chat(**tok);
  absl::StatusOr<ChatPrompter::Prompt> p = chat.Encode({{{"user", "hi"}}});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->tokens, ElementsAreArray((*tok)->Encode(
                             "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", false)));
}

TEST(ChatPrompterTest, NoOrUnknownTemplateIsFailedPrecondition) {
  for (const char* jinja : {"", "{{ 'USER: ' + message['content'] }}"}) {
    std::unique_ptr<Tokenizer> tok = ChatTokenizer(jinja);
    ASSERT_NE(tok, nullptr);
    const ChatPrompter chat(*tok);
    EXPECT_EQ(chat.family_name(), "");
    absl::StatusOr<ChatPrompter::Prompt> p = chat.Encode({{{"user", "hi"}}});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(p.status().message(), HasSubstr("chat template"));
  }
}

TEST(ChatPrompterTest, BadRoleIsInvalidArgument) {
  std::unique_ptr<Tokenizer> tok = ChatTokenizer(kChatMl);
  ASSERT_NE(tok, nullptr);
  const ChatPrompter chat(*tok);
  EXPECT_EQ(chat.Encode({{{"tool", "x"}}}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatPrompterTest, VocabularyReadsTheTokenizerStringsFromGguf) {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetString("tokenizer.ggml.pre", "default");
  w.SetString("tokenizer.chat_template", kChatMl);
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  absl::StatusOr<std::string> bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<GgufFile> file = ParseGguf(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Vocabulary> v = VocabularyFromGguf(*file);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->tokenizer_model, "llama");
  EXPECT_EQ(v->tokenizer_pre, "default");
  EXPECT_EQ(v->chat_template, kChatMl);

  w.SetUint32("tokenizer.chat_template", 7);
  bytes = w.WriteToString();
  ASSERT_TRUE(bytes.ok());
  file = ParseGguf(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  ASSERT_TRUE(file.ok());
  v = VocabularyFromGguf(*file);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(), HasSubstr("tokenizer.chat_template"));
}

}  // namespace
}  // namespace kvserve::model
