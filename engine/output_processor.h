// What one request's sampled tokens become for its caller: the single owner of
// per-token output processing (end of text, stop token ids, UTF-8 safe detokenizing,
// stop strings, the length limit and the final flush of held-back text). The engine
// keeps one per running sequence; offline generation keeps one for its only sequence.
#ifndef KVSERVE_ENGINE_OUTPUT_PROCESSOR_H_
#define KVSERVE_ENGINE_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "engine/finish_reason.h"
#include "engine/sampling_params.h"
#include "engine/stop_matcher.h"
#include "model/tokenizer.h"

namespace kvserve::engine {

// The result of one sampled token.
struct TokenOutput {
  // The token belongs to the completion the caller sees (false for EOS and stop token
  // ids, which end generation without being emitted).
  bool emit_token = false;
  // Text that became final with this token: UTF-8 safe, never any part of a stop
  // string; on the last token it includes every byte still held back.
  std::string text;
  // Set when generation ends with this token.
  std::optional<FinishReason> finish;
};

// Rules, in order, for each sampled token:
//   1. EOS (unless params.ignore_eos) or one of params.stop_token_ids: finish kStop;
//      the token is not emitted; held-back text is flushed.
//   2. Otherwise the token is emitted and its text goes through the stop-string
//      matcher: a match finishes kStopString (text cut before the match).
//   3. Otherwise, when the caller says the token reached the length limit, held-back
//      text is flushed and generation finishes kLength (kStopString if the flushed text
//      completes a stop string).
// A sampled BOS is an ordinary token (as in llama.cpp and vLLM): only EOS ends text.
// Without a tokenizer (a vocabulary that cannot build one) every text is empty and
// stop strings never match; Engine::Submit refuses stop strings then.
//
// Threading: not thread-safe; one per request. `tokenizer` (may be null) must outlive it.
class OutputProcessor {
 public:
  // `prev_token` is the last context token (so the decoder drops the space after BOS
  // as a full decode would), or -1 when the caller decodes the context itself.
  OutputProcessor(const SamplingParams& params, int32_t eos_id, const model::Tokenizer* tokenizer,
                  int32_t prev_token);

  // Processes one sampled token. `at_length_limit`: this token is the last the request
  // may generate (max_tokens reached or the context is full). Must not be called after
  // a result with `finish` set.
  TokenOutput Process(int32_t token, bool at_length_limit);

 private:
  bool IsStopToken(int32_t token) const;
  // Flushes the decoder and the stop matcher into `out`; a stop string completed by
  // the flushed bytes sets kStopString.
  void FlushInto(TokenOutput& out);

  const int32_t eos_id_;
  const bool ignore_eos_;
  const std::vector<int32_t> stop_token_ids_;
  std::optional<model::TokenStreamDecoder> decoder_;
  StopMatcher stop_;
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_OUTPUT_PROCESSOR_H_
