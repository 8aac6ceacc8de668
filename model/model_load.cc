// Model::Load: picks the reader from the file's content and wires mmap storage.
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama2c.h"
#include "model/mapped_file.h"
#include "model/model.h"
#include "model/panels.h"

namespace kvserve::model {
namespace {

absl::Status Prefixed(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

bool HasGgufMagic(std::span<const uint8_t> b) {
  return b.size() >= 4 && b[0] == 'G' && b[1] == 'G' && b[2] == 'U' && b[3] == 'F';
}

// Beside a llama2.c checkpoint, tokenizer.bin wins over tok<vocab_size>.bin
// (llama2.c's own naming, e.g. tok512.bin). Empty when neither exists.
std::string FindSiblingTokenizer(const std::string& model_path, int vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(model_path).parent_path();
  for (const std::string& name :
       {std::string("tokenizer.bin"), absl::StrCat("tok", vocab_size, ".bin")}) {
    const std::filesystem::path candidate = dir / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Model>> LoadLlama2c(std::shared_ptr<const MappedFile> file,
                                                   const std::string& tokenizer_path) {
  const std::string& path = file->path();
  absl::StatusOr<Llama2cCheckpoint> ck = ParseLlama2cCheckpoint(file->bytes());
  if (!ck.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a GGUF file, and not a llama2.c checkpoint: ", ck.status().message()));
  }
  std::string tok_path = tokenizer_path;
  if (tok_path.empty()) {
    tok_path = FindSiblingTokenizer(path, ck->config.vocab_size);
    if (tok_path.empty()) {
      return absl::NotFoundError(
          absl::StrCat(path,
                       ": llama2.c checkpoint without a tokenizer: pass a tokenizer path or put "
                       "tokenizer.bin or tok",
                       ck->config.vocab_size, ".bin beside it"));
    }
  }
  absl::StatusOr<std::unique_ptr<MappedFile>> tok_file = MappedFile::Open(tok_path);
  if (!tok_file.ok()) return tok_file.status();
  absl::StatusOr<Vocabulary> vocab =
      ParseLlama2cTokenizer((*tok_file)->bytes(), ck->config.vocab_size);
  if (!vocab.ok()) return Prefixed(tok_path, vocab.status());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::FromParts(
      std::move(ck->config), std::move(ck->weights), *std::move(vocab), std::move(file));
  if (!model.ok()) return Prefixed(path, model.status());
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                                   const std::string& tokenizer_path,
                                                   const LoadOptions& options) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(
      path, options.huge_pages ? FileResidency::kHugePages : FileResidency::kMapped);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<const MappedFile> file = *std::move(mapped);
  absl::StatusOr<std::unique_ptr<Model>> model;
  if (!HasGgufMagic(file->bytes())) {
    model = LoadLlama2c(std::move(file), tokenizer_path);
    if (!model.ok()) return model.status();
  } else {
    if (!tokenizer_path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a GGUF file carries its own tokenizer; tokenizer path ",
                       tokenizer_path, " is only for llama2.c checkpoints"));
    }
    absl::StatusOr<GgufFile> gguf = ParseGguf(file->bytes());
    if (!gguf.ok()) return Prefixed(path, gguf.status());
    model = ModelFromGguf(*gguf, file);
    if (!model.ok()) return Prefixed(path, model.status());
  }
  if (options.panels.any()) {
    // After FromParts computed the fingerprint from the file's bytes. The Model is the
    // only owner of the file's bytes, so the originals can go.
    absl::StatusOr<common::HugePageMemory> panels =
        PackPanels((*model)->weights_, PanelPackOptions{.types = options.panels,
                                                        .release_originals = true,
                                                        .threads = options.pack_threads});
    if (!panels.ok()) return Prefixed(path, panels.status());
    (*model)->panels_ = std::make_shared<common::HugePageMemory>(*std::move(panels));
  }
  return model;
}

absl::StatusOr<Vocabulary> LoadVocabulary(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  if (!HasGgufMagic((*file)->bytes())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a GGUF file"));
  }
  absl::StatusOr<GgufFile> gguf = ParseGguf((*file)->bytes());
  if (!gguf.ok()) return Prefixed(path, gguf.status());
  absl::StatusOr<Vocabulary> vocab = VocabularyFromGguf(*gguf);
  if (!vocab.ok()) return Prefixed(path, vocab.status());
  return vocab;
}

}  // namespace kvserve::model
