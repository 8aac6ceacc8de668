// SentencePiece BPE tokenizer (the kind GGUF calls "llama") and a streaming,
// UTF-8-safe detokenizer for generated tokens.
//
// Encoding follows llama.cpp's llm_tokenizer_spm and llama2.c's encode():
//   1. When vocab.add_space_prefix and the text is not empty, prepend " ".
//   2. Replace every ' ' (0x20) with "▁" (U+2581).
//   3. Split into UTF-8 characters. A character is a complete, well-formed UTF-8
//      sequence; any other byte is a one-byte symbol of its own (llama2.c does the
//      same in effect; llama.cpp groups by the lead byte only, which gives the same
//      tokens for valid UTF-8).
//   4. Repeatedly merge the adjacent pair whose concatenation is a mergeable piece
//      with the highest score; ties go to the leftmost pair.
//   5. Each final symbol becomes its piece id, or, when the symbol is not a piece,
//      one byte-fallback token <0xNN> per byte.
// Mergeable pieces are those of kind kNormal and kUserDefined. Control, unknown,
// unused and byte tokens are never produced from text (text "<s>" encodes as the
// characters '<', 's', '>'). When two mergeable pieces have the same text, the
// lower id wins.
//
// Decoding: byte tokens give their byte, normal pieces give their text with "▁"
// turned into ' ', user-defined pieces their text verbatim, every other kind "".
// Following the SentencePiece decoder (and llama2.c), when add_space_prefix is set
// a normal piece right after BOS loses one leading ' '. The bytes are then made
// valid UTF-8: every ill-formed sequence (maximal subpart, as Unicode recommends)
// becomes U+FFFD. Hence for any valid UTF-8 `x` without U+2581,
// Decode(Encode(x, /*add_bos=*/true)) == x.
#ifndef KVSERVE_MODEL_TOKENIZER_H_
#define KVSERVE_MODEL_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/vocabulary.h"

namespace kvserve::model {

// Immutable after Create; every method is const and safe to call from many
// threads at once.
class Tokenizer {
 public:
  // Validates `vocab` and builds the lookup tables (the vocabulary is copied).
  // INVALID_ARGUMENT when: the vocabulary is empty; pieces, scores and kinds
  // differ in length; a score is NaN; bos_id or eos_id is out of range; unk_id is
  // neither -1 nor in range; a kByte piece is not "<0xNN>" or repeats a byte; or
  // one of the 256 byte-fallback tokens is missing (the message names it).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const Vocabulary& vocab);

  // Encodes any bytes (never fails; bytes that are no piece use byte fallback).
  // With `add_bos` the result starts with vocab().bos_id. Encode("", true) is
  // {bos_id} and Encode("", false) is {}, as in llama.cpp and llama2.c.
  // O(n log n) time in the text length n and about 100 bytes of scratch memory per
  // input byte; callers bound n (a 4k-token prompt of 11 KB takes about 2 ms).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;

  // Full decode as described above, as if the token before ids[0] were none.
  // Ids outside [0, vocab().size()) are skipped (they contribute no text and do
  // not count as the previous token); use DecodeChecked to reject them instead.
  // The result is always valid UTF-8.
  std::string Decode(std::span<const int32_t> ids) const;

  // Like Decode, but INVALID_ARGUMENT naming the first out-of-range id and its index.
  absl::StatusOr<std::string> DecodeChecked(std::span<const int32_t> ids) const;

  const Vocabulary& vocab() const { return vocab_; }

 private:
  friend class TokenStreamDecoder;

  explicit Tokenizer(const Vocabulary& vocab) : vocab_(vocab) {}

  // The bytes token `id` contributes after `prev_id` (before UTF-8 repair).
  // Precondition: 0 <= id < vocab_.size().
  std::string_view PieceBytes(int32_t prev_id, int32_t id) const;

  Vocabulary vocab_;
  // Mergeable piece text -> id (kNormal and kUserDefined only).
  absl::flat_hash_map<std::string, int32_t> piece_ids_;
  std::array<int32_t, 256> byte_ids_{};  // byte value -> id of its <0xNN> token
  std::vector<std::string> decoded_;     // [vocab] bytes each token decodes to
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
