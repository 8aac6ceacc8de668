// The tokenizer of a vocabulary, whatever its kind (SentencePiece, model/spm_encoder.h,
// or byte-level BPE, model/bpe_encoder.h), and a streaming, UTF-8-safe detokenizer
// for generated tokens.
//
// Encoding, shared by both kinds (llama.cpp's llama_vocab::tokenize):
//   1. Split the text on special-token strings (model/special_tokens.h): user-defined
//      tokens always, control and unknown tokens only with parse_special.
//   2. Encode each plain-text part with the vocabulary's TextEncoder.
//   3. With add_bos, BOS first and, when vocab.add_eos, EOS last.
// Without parse_special, text "<s>" or "<|eot_id|>" is the characters, never the
// control token: text from users cannot end a turn unless the caller asks for it.
//
// Decoding: each token's bytes (TextEncoder::DecodedPiece). Following the
// SentencePiece decoder (and llama2.c), when add_space_prefix is set a normal piece
// right after BOS loses one leading ' '. The bytes are then made valid UTF-8: every
// ill-formed sequence (maximal subpart, as Unicode recommends) becomes U+FFFD. Hence
// Decode(Encode(x, /*add_bos=*/true)) == x for valid UTF-8 `x` that holds no string of a
// user-defined token (SentencePiece adds its dummy space after one; Phi-3's swallow
// whitespace), no U+2581 with SentencePiece, and no byte the vocabulary lacks a token
// for (Falcon has none for \v and 27 other control bytes; they are dropped, as in
// llama.cpp).
#ifndef KVSERVE_MODEL_TOKENIZER_H_
#define KVSERVE_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/special_tokens.h"
#include "model/text_encoder.h"
#include "model/vocabulary.h"

namespace kvserve::model {

// Immutable after Create; every method is const and safe to call from many
// threads at once.
class Tokenizer {
 public:
  // Validates `vocab` and builds the lookup tables (the tokenizer keeps `vocab`; pass
  // it with std::move to avoid copying a large vocabulary).
  // INVALID_ARGUMENT when: the vocabulary is empty; pieces, scores and kinds
  // differ in length; bos_id or eos_id is out of range; unk_id is neither -1 nor in
  // range; or the encoder of the vocabulary's kind refuses it (SpmEncoder::Create,
  // BpeEncoder::Create: e.g. a missing byte-fallback token, an unknown pre-tokenizer).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(Vocabulary vocab);

  // Encodes any bytes (never fails; every byte is representable). With `add_bos`
  // the result starts with vocab().bos_id (and ends with eos_id when
  // vocab().add_eos). Encode("", true) is {bos_id} and Encode("", false) is {}, as
  // in llama.cpp and llama2.c. `parse_special`: control and unknown token strings in
  // the text become those tokens (default: they are plain text).
  // O(n log n) time in the text length n and about 100 bytes of scratch memory per
  // input byte; callers bound n (a 4k-token prompt of 11 KB takes about 2 ms).
  // Precondition: text.size() < 2^31.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const;

  // Full decode as described above, as if the token before ids[0] were none.
  // Ids outside [0, vocab().size()) are skipped (they contribute no text and do
  // not count as the previous token); use DecodeChecked to reject them instead.
  // The result is always valid UTF-8.
  std::string Decode(std::span<const int32_t> ids) const;

  // Like Decode, but INVALID_ARGUMENT naming the first out-of-range id and its index.
  absl::StatusOr<std::string> DecodeChecked(std::span<const int32_t> ids) const;

  const Vocabulary& vocab() const { return vocab_; }

  // The bytes token `id` contributes after `prev_id` (before UTF-8 repair: may be part
  // of a character; the OpenAI API's logprobs report them as "bytes").
  // Precondition: 0 <= id < vocab_.size().
  std::string_view PieceBytes(int32_t prev_id, int32_t id) const;

 private:
  friend class TokenStreamDecoder;

  explicit Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)), special_(vocab_) {}

  Vocabulary vocab_;
  SpecialTokenSplitter special_;                // views into vocab_
  std::unique_ptr<const TextEncoder> encoder_;  // refers to vocab_
  std::vector<std::string> decoded_;            // [vocab] bytes each token decodes to
};

// Turns generated tokens into text as they arrive, never splitting a UTF-8
// character: bytes of an incomplete (but so far well-formed) character are held
// back until the character completes. For any ids, the concatenation of every
// Push and a final Flush equals tokenizer.Decode(ids) when the decoder starts
// with prev_token = -1. Not thread-safe: use one per sequence. `tok` must outlive it.
class TokenStreamDecoder {
 public:
  // `prev_token` is the token before the first pushed one (normally the last
  // prompt token) so that the space after BOS is dropped as in a full decode.
  explicit TokenStreamDecoder(const Tokenizer& tok, int32_t prev_token = -1);

  // Returns the text that became complete with `id` (possibly empty). Ids out of
  // range are skipped, as in Tokenizer::Decode.
  std::string Push(int32_t id);

  // Returns whatever is held back, each ill-formed part as U+FFFD, and resets the
  // pending bytes (the previous token is kept).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  int32_t prev_token_;
  std::string pending_;  // at most 3 bytes: a well-formed prefix of one character
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TOKENIZER_H_
