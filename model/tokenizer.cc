#include "model/tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/bpe_encoder.h"
#include "model/spm_encoder.h"
#include "model/utf8.h"

namespace kvserve::model {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends `bytes` to `out` as valid UTF-8, each ill-formed subpart replaced by
// U+FFFD. An incomplete character at the end is replaced too when `final`, and
// otherwise left unconsumed. Returns the number of bytes consumed.
size_t AppendValidUtf8(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step step = ScanUtf8(bytes.substr(i));
    switch (step.kind) {
      case Utf8Kind::kChar:
        out.append(bytes.substr(i, step.n));
        break;
      case Utf8Kind::kIllFormed:
        out.append(kReplacement);
        break;
      case Utf8Kind::kIncomplete:
        if (!final) return i;
        out.append(kReplacement);
        break;
    }
    i += step.n;
  }
  return i;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocabulary vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0) return absl::InvalidArgumentError("vocabulary is empty");
  if (vocab.scores.size() != n || vocab.kinds.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary has ", n, " pieces but ",
                                                   vocab.scores.size(), " scores and ",
                                                   vocab.kinds.size(), " token kinds"));
  }
  if (vocab.pieces.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("vocabulary has more than 2^31-1 pieces");
  }
  const int32_t size = vocab.size();
  if (vocab.bos_id < 0 || vocab.bos_id >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("BOS id ", vocab.bos_id, " is outside the vocabulary of ", size));
  }
  if (vocab.eos_id < 0 || vocab.eos_id >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("EOS id ", vocab.eos_id, " is outside the vocabulary of ", size));
  }
  if (vocab.unk_id < -1 || vocab.unk_id >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("UNK id ", vocab.unk_id, " is outside the vocabulary of ", size));
  }

  const bool bpe = vocab.model == TokenizerModel::kBytePairEncoding;
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer(std::move(vocab)));
  if (bpe) {
    absl::StatusOr<std::unique_ptr<BpeEncoder>> enc = BpeEncoder::Create(tok->vocab_);
    if (!enc.ok()) return enc.status();
    tok->encoder_ = *std::move(enc);
  } else {
    absl::StatusOr<std::unique_ptr<SpmEncoder>> enc = SpmEncoder::Create(tok->vocab_);
    if (!enc.ok()) return enc.status();
    tok->encoder_ = *std::move(enc);
  }
  tok->decoded_.resize(n);
  for (int32_t id = 0; id < size; ++id) tok->decoded_[id] = tok->encoder_->DecodedPiece(id);
  return tok;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos) out.push_back(vocab_.bos_id);
  std::vector<TextPart> parts;
  special_.Split(text, parse_special, parts);
  bool at_boundary = true;
  for (const TextPart& part : parts) {
    if (part.token >= 0) {
      out.push_back(part.token);
      at_boundary = true;
    } else {
      encoder_->Encode(part.text, at_boundary, out);
      at_boundary = false;
    }
  }
  if (add_bos && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

std::string_view Tokenizer::PieceBytes(int32_t prev_id, int32_t id) const {
  std::string_view s = decoded_[id];
  if (prev_id == vocab_.bos_id && vocab_.add_space_prefix &&
      vocab_.kinds[id] == TokenKind::kNormal && !s.empty() && s[0] == ' ') {
    s.remove_prefix(1);
  }
  return s;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string bytes;
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_.size()) continue;
    bytes.append(PieceBytes(prev, id));
    prev = id;
  }
  std::string out;
  out.reserve(bytes.size());
  AppendValidUtf8(bytes, /*final=*/true, out);
  return out;
}

absl::StatusOr<std::string> Tokenizer::DecodeChecked(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", ids[i], " at index ", i, " is outside the vocabulary of ", vocab_.size()));
    }
  }
  return Decode(ids);
}

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tok, int32_t prev_token)
    : tok_(tok), prev_token_(prev_token) {}

std::string TokenStreamDecoder::Push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_.size()) return "";
  pending_.append(tok_.PieceBytes(prev_token_, id));
  prev_token_ = id;
  std::string out;
  const size_t consumed = AppendValidUtf8(pending_, /*final=*/false, out);
  pending_.erase(0, consumed);
  return out;
}

std::string TokenStreamDecoder::Flush() {
  std::string out;
  AppendValidUtf8(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace kvserve::model
