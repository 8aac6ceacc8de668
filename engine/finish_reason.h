// Why a generation ended: one enum for the engine, offline generation and the service.
#ifndef KVSERVE_ENGINE_FINISH_REASON_H_
#define KVSERVE_ENGINE_FINISH_REASON_H_

namespace kvserve::engine {

enum class FinishReason {
  kStop,        // EOS (unless sampling.ignore_eos) or one of sampling.stop_token_ids
  kStopString,  // a stop string matched
  kLength,      // max_tokens reached or the context is full
  kCancelled,   // Cancel() or the sink asked to stop
  kDeadline,    // the request deadline passed
  kError,       // see the status passed to OnFinish
};

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_FINISH_REASON_H_
