// kvserve-tokenize: prints the token ids of a text as one JSON array on stdout.
//
//   kvserve-tokenize --model FILE (--text TEXT | --file PATH) [--no-bos] [--parse-special]
//
// FILE is any GGUF file with a vocabulary, vocabulary-only files included (llama.cpp's
// models/ggml-vocab-*.gguf). BOS (and EOS) are added as the file declares
// (tokenizer.ggml.add_bos_token / add_eos_token, llama.cpp's defaults) unless --no-bos.
// Control-token strings in the text are plain text unless --parse-special.
// Exit status: 0 on success; 2 for a missing flag or an unreadable or unsupported file
// (the message on stderr); 1 for an unknown flag or a malformed value (Abseil).
// This file only maps flags onto model::LoadVocabulary and model::Tokenizer.
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace {

// --text: unset or any text, the empty text included.
struct TextFlag {
  std::optional<std::string> text;
};
bool AbslParseFlag(absl::string_view value, TextFlag* flag, std::string* /*error*/) {
  flag->text = std::string(value);
  return true;
}
std::string AbslUnparseFlag(const TextFlag& flag) { return flag.text.value_or(""); }

}  // namespace

ABSL_FLAG(std::string, model, "", "GGUF file with a vocabulary (weights optional). Required.");
ABSL_FLAG(TextFlag, text, {}, "The text to tokenize (may be empty). This or --file is required.");
ABSL_FLAG(std::string, file, "", "Read the text from this file instead of --text.");
ABSL_FLAG(bool, no_bos, false, "Do not add BOS/EOS even when the vocabulary asks for them.");
ABSL_FLAG(bool, parse_special, false,
          "Turn control-token strings in the text (e.g. <|eot_id|>) into those tokens.");

namespace {

constexpr char kUsage[] =
    "Prints the token ids of a text as one JSON array.\n"
    "Usage: kvserve-tokenize --model FILE --text TEXT [--no-bos] [--parse-special]";

absl::StatusOr<std::string> InputText() {
  const std::optional<std::string>& text = absl::GetFlag(FLAGS_text).text;
  const std::string path = absl::GetFlag(FLAGS_file);
  if (text.has_value() == !path.empty()) {
    return absl::InvalidArgumentError("exactly one of --text and --file is required");
  }
  if (text.has_value()) return *text;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> Run() {
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  absl::StatusOr<std::string> text = InputText();
  if (!text.ok()) return text.status();
  absl::StatusOr<kvserve::model::Vocabulary> vocab =
      kvserve::model::LoadVocabulary(absl::GetFlag(FLAGS_model));
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::unique_ptr<kvserve::model::Tokenizer>> tok =
      kvserve::model::Tokenizer::Create(*std::move(vocab));
  if (!tok.ok()) return tok.status();
  const bool add_bos = (*tok)->vocab().add_bos && !absl::GetFlag(FLAGS_no_bos);
  return absl::StrCat(
      "[", absl::StrJoin((*tok)->Encode(*text, add_bos, absl::GetFlag(FLAGS_parse_special)), ","),
      "]");
}

}  // namespace

int main(int argc, char** argv) {
  kvserve::common::ParseFlags(argc, argv, kUsage, "tokenize_main.cc");
  absl::StatusOr<std::string> json = Run();
  if (!json.ok()) {
    std::fprintf(stderr, "kvserve-tokenize: %s\n", std::string(json.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", json->c_str());
  return 0;
}
