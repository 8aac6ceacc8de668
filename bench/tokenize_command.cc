// kvserve-bench tokenize: prints the token ids of a text as one JSON array on stdout.
//
//   kvserve-bench tokenize --model FILE (--text TEXT | --file PATH) [--no-bos] [--parse-special]
//
// FILE is any GGUF file with a vocabulary, vocabulary-only files included (llama.cpp's
// models/ggml-vocab-*.gguf). BOS (and EOS) are added as the file declares
// (tokenizer.ggml.add_bos_token / add_eos_token, llama.cpp's defaults) unless --no-bos.
// Control-token strings in the text are plain text unless --parse-special.
// Exit status as for every kvserve-bench subcommand (bench/tool_main.h): 2 for a missing
// flag or a missing file.
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
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "model/model.h"
#include "model/tokenizer.h"

ABSL_FLAG(std::string, file, "", "Read the text from this file instead of --text.");
ABSL_FLAG(bool, no_bos, false, "Do not add BOS/EOS even when the vocabulary asks for them.");

namespace {

constexpr char kUsage[] =
    "Prints the token ids of a text as one JSON array.\n"
    "Usage: kvserve-bench tokenize --model FILE (--text TEXT | --file PATH) [--no-bos] "
    "[--parse-special]";

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

absl::Status Run() {
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
  std::printf("[%s]\n",
              absl::StrJoin((*tok)->Encode(*text, add_bos, absl::GetFlag(FLAGS_parse_special)), ",")
                  .c_str());
  return absl::OkStatus();
}

}  // namespace

namespace kvserve::bench {

Subcommand TokenizeCommand() {
  return {
      .name = "tokenize",
      .summary = "print the token ids of a text as one JSON array",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"model", "GGUF file with a vocabulary (weights optional). Required."},
                       {"text", "The text to tokenize (may be empty). This or --file is required."},
                       {"parse_special"}},
      .run = [](char**) { return Run(); },
  };
}

}  // namespace kvserve::bench
