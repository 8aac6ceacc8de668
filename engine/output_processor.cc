#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

namespace kvserve::engine {

OutputProcessor::OutputProcessor(const SamplingParams& params, int32_t eos_id,
                                 const model::Tokenizer* tokenizer, int32_t prev_token)
    : eos_id_(eos_id),
      ignore_eos_(params.ignore_eos),
      stop_token_ids_(params.stop_token_ids),
      stop_(params.stop_strings) {
  if (tokenizer != nullptr) decoder_.emplace(*tokenizer, prev_token);
}

bool OutputProcessor::IsStopToken(int32_t token) const {
  return (!ignore_eos_ && token == eos_id_) ||
         std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

void OutputProcessor::FlushInto(TokenOutput& out) {
  if (decoder_.has_value()) {
    StopMatcher::Result tail = stop_.Feed(decoder_->Flush());
    out.text += tail.text;
    if (tail.stopped) {
      out.finish = FinishReason::kStopString;
      return;
    }
  }
  out.text += stop_.Flush();
}

TokenOutput OutputProcessor::Process(int32_t token, bool at_length_limit) {
  TokenOutput out;
  if (IsStopToken(token)) {
    FlushInto(out);
    out.finish = FinishReason::kStop;  // the stop token wins over a flushed stop string
    return out;
  }
  out.emit_token = true;
  StopMatcher::Result r = stop_.Feed(decoder_.has_value() ? decoder_->Push(token) : "");
  out.text = std::move(r.text);
  if (r.stopped) {
    out.finish = FinishReason::kStopString;
    return out;
  }
  if (at_length_limit) {
    FlushInto(out);
    if (!out.finish.has_value()) out.finish = FinishReason::kLength;
  }
  return out;
}

}  // namespace kvserve::engine
