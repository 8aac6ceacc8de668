// The vocabulary-only GGUF files of ../shared/vocab (copied into models/vocab by
// models/fetch-vocab.sh) and llama.cpp's test texts and ids for them. Test-only.
#ifndef KVSERVE_MODEL_TESTING_VOCAB_FILES_H_
#define KVSERVE_MODEL_TESTING_VOCAB_FILES_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kvserve::model::testing {

// The 12 .inp/.out pairs of the folder: {test file stem, vocabulary file}. Baichuan
// and GPT-NeoX have a vocabulary but no llama.cpp ids (round trip only).
struct VocabCase {
  std::string name;   // ggml-vocab-<name>.gguf.inp/.out
  std::string vocab;  // ggml-vocab-<vocab>.gguf
};
inline std::vector<VocabCase> VocabCases() {
  std::vector<VocabCase> cases;
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "mpt", "falcon", "starcoder", "refact",
                           "deepseek-coder", "deepseek-llm", "llama-bpe", "qwen2"}) {
    cases.push_back({name, name});
  }
  cases.push_back({"deepseek-r1-qwen", "qwen2"});  // llama.cpp tests it with Qwen2's vocabulary
  return cases;
}

// Every vocabulary file, including gpt-neox (no llama.cpp ids in the folder).
inline std::vector<std::string> VocabNames() {
  return {"llama-spm", "phi-3",  "baichuan",       "gpt-2",        "gpt-neox",  "mpt",  "falcon",
          "starcoder", "refact", "deepseek-coder", "deepseek-llm", "llama-bpe", "qwen2"};
}

// $KVSERVE_MODELS_DIR/vocab when it holds the files; FAILED_PRECONDITION naming what
// is missing otherwise.
inline absl::StatusOr<std::string> VocabDir() {
  const char* models = std::getenv("KVSERVE_MODELS_DIR");
  if (models == nullptr) return absl::FailedPreconditionError("KVSERVE_MODELS_DIR is unset");
  const std::string dir = std::string(models) + "/vocab";
  for (const std::string& name : VocabNames()) {
    const std::string path = dir + "/ggml-vocab-" + name + ".gguf";
    if (!std::filesystem::exists(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is missing: run models/fetch-vocab.sh (mirror ../shared/vocab)"));
    }
  }
  return dir;
}

// True in CI, where missing vocabulary files are a failure rather than a skip.
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The texts of a .inp file (separated by "\n__ggml_vocab_test__\n", which also ends it).
inline std::vector<std::string> ReadVocabTexts(const std::string& path) {
  std::vector<std::string> texts = absl::StrSplit(ReadFileOrEmpty(path), "\n__ggml_vocab_test__\n");
  if (!texts.empty() && texts.back().empty()) texts.pop_back();
  return texts;
}

// The id lines of a .out file; an id that does not parse becomes INT32_MIN (and fails).
inline std::vector<std::vector<int32_t>> ReadVocabIds(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  for (absl::string_view line : absl::StrSplit(ReadFileOrEmpty(path), '\n')) {
    std::vector<int32_t> ids;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int32_t id;
      ids.push_back(absl::SimpleAtoi(word, &id) ? id : INT32_MIN);
    }
    out.push_back(std::move(ids));
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

}  // namespace kvserve::model::testing

#endif  // KVSERVE_MODEL_TESTING_VOCAB_FILES_H_
