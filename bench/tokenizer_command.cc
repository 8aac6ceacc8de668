// kvserve-bench tokenizer: vocabulary load time and encode throughput of one GGUF
// vocabulary on one text file, measured in-process (docs/performance.md).
//
//   kvserve-bench tokenizer --vocab FILE --text FILE [--runs N]
//
// Prints one JSON line: median load seconds (LoadVocabulary: parse + copy, and
// Tokenizer::Create: tables and merges), median encode seconds and MB/s (MB = 10^6
// bytes) over --runs runs, and the token count. Exit status as bench/tool_main.h says.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "model/model.h"
#include "model/tokenizer.h"

ABSL_FLAG(std::string, vocab, "", "GGUF file with a vocabulary. Required.");
ABSL_FLAG(int32_t, runs, 5, "Runs of each measurement; the median is reported (>= 1).");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  const std::string vocab_path = absl::GetFlag(FLAGS_vocab);
  const std::string text_path = absl::GetFlag(FLAGS_text).text.value_or("");
  const int runs = absl::GetFlag(FLAGS_runs);
  if (vocab_path.empty() || text_path.empty()) {
    return absl::InvalidArgumentError("--vocab and --text are required");
  }
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", text_path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  std::vector<double> read_s, create_s, encode_s;
  std::unique_ptr<kvserve::model::Tokenizer> tok;
  for (int r = 0; r < runs; ++r) {
    Clock::time_point t0 = Clock::now();
    absl::StatusOr<kvserve::model::Vocabulary> vocab = kvserve::model::LoadVocabulary(vocab_path);
    if (!vocab.ok()) return vocab.status();
    read_s.push_back(Seconds(t0));
    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<kvserve::model::Tokenizer>> t =
        kvserve::model::Tokenizer::Create(*std::move(vocab));
    if (!t.ok()) return t.status();
    create_s.push_back(Seconds(t0));
    tok = *std::move(t);
  }
  size_t n_tokens = 0;
  for (int r = 0; r < runs; ++r) {
    const Clock::time_point t0 = Clock::now();
    n_tokens = tok->Encode(text, /*add_bos=*/false).size();
    encode_s.push_back(Seconds(t0));
  }
  const double encode = Median(encode_s);
  std::printf(
      "{\"vocab\": \"%s\", \"tokens_in_vocab\": %d, \"merges\": %zu, \"load_vocab_s\": %.4f, "
      "\"create_tokenizer_s\": %.4f, \"text_bytes\": %zu, \"tokens\": %zu, \"encode_s\": %.4f, "
      "\"encode_mb_per_s\": %.2f}\n",
      vocab_path.c_str(), tok->vocab().size(), tok->vocab().merges.size(), Median(read_s),
      Median(create_s), text.size(), n_tokens, encode, text.size() / 1e6 / encode);
  return absl::OkStatus();
}

}  // namespace

namespace kvserve::bench {

Subcommand TokenizerCommand() {
  return {
      .name = "tokenizer",
      .summary = "vocabulary load time and encode throughput of one GGUF vocabulary",
      .usage =
          "Vocabulary load time and encode throughput; prints one JSON line.\n"
          "Usage: kvserve-bench tokenizer --vocab FILE --text FILE [--runs N]",
      .file = __FILE__,
      .shared_flags = {{"text", "Text file to encode (bench/make_tokenizer_text.py). Required."}},
      .run = [](char**) { return Run(); },
  };
}

}  // namespace kvserve::bench
