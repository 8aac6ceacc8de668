#include "engine/offline_generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/kv_arena.h"
#include "engine/output_processor.h"
#include "engine/sampler.h"
#include "model/kv_layout.h"

namespace kvserve::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<OfflineGenerateResult> GenerateOffline(
    const model::Model& model, const model::Tokenizer& tokenizer, std::string_view prompt,
    const OfflineGenerateOptions& options, absl::FunctionRef<void(std::string_view)> on_text) {
  const model::ModelConfig& config = model.config();
  const model::Vocabulary& vocab = tokenizer.vocab();
  const int32_t vocab_size = config.vocab_size;

  absl::StatusOr<Sampler> sampler =
      Sampler::Create(options.sampling, vocab_size, options.fallback_seed);
  if (!sampler.ok()) return sampler.status();

  OfflineGenerateResult result;
  result.prompt_tokens = tokenizer.Encode(prompt, vocab.add_bos, options.parse_special);
  const int32_t prompt_len = static_cast<int32_t>(result.prompt_tokens.size());
  if (prompt_len == 0) {
    return absl::InvalidArgumentError("prompt is empty and the vocabulary adds no BOS");
  }
  if (prompt_len >= config.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt has ", prompt_len, " tokens; the model's context holds ", config.context_length));
  }
  // Every token, the last sampled one included, must have a position in the context.
  const int32_t max_generated =
      std::min(options.sampling.max_tokens, config.context_length - prompt_len);

  const model::KvLayout layout =
      model::KvLayout::ForModel(config, options.kv_block_tokens, options.kv_dtype);
  backends::BackendOptions backend_options;
  backend_options.threads = options.threads;
  absl::StatusOr<std::unique_ptr<backends::Backend>> backend =
      backends::CreateBackend(options.backend, model, layout, backend_options);
  if (!backend.ok()) return backend.status();
  backends::KvArena arena(layout);
  const std::span<uint8_t* const> blocks = arena.Allocate(prompt_len + max_generated);

  // The echoed prompt is decoded from the start (the space after BOS dropped), so its
  // text is exactly what llama2.c prints; generated text continues after its last token.
  if (options.echo_prompt) {
    model::TokenStreamDecoder prompt_decoder(tokenizer);
    std::string text;
    for (int32_t token : result.prompt_tokens) text += prompt_decoder.Push(token);
    text += prompt_decoder.Flush();
    if (!text.empty()) on_text(text);
  }
  OutputProcessor output(options.sampling, vocab.eos_id, &tokenizer, result.prompt_tokens.back());

  std::vector<int32_t> context = result.prompt_tokens;         // prompt + generated
  std::vector<float> logits(static_cast<size_t>(vocab_size));  // [1, vocab]
  backends::Batch batch;
  batch.sequences.resize(1);
  backends::SequenceInput& sequence = batch.sequences[0];
  sequence.blocks = blocks;
  sequence.want_logits = true;

  // Prefill: the whole prompt in one step.
  sequence.tokens = result.prompt_tokens;
  sequence.cached_tokens = 0;
  const auto prefill_start = std::chrono::steady_clock::now();
  if (absl::Status status = (*backend)->Forward(batch, logits); !status.ok()) return status;
  result.prefill_seconds = SecondsSince(prefill_start);

  const auto decode_start = std::chrono::steady_clock::now();
  while (true) {
    const int32_t token = sampler->Sample(logits, context, prompt_len, nullptr);
    result.generated_tokens.push_back(token);
    context.push_back(token);
    result.decode_seconds = SecondsSince(decode_start);
    TokenOutput out = output.Process(
        token, static_cast<int32_t>(result.generated_tokens.size()) >= max_generated);
    if (!out.text.empty()) on_text(out.text);
    if (out.finish.has_value()) {
      result.finish = *out.finish;
      break;
    }

    // Decode step: feed the sampled token at the next position.
    sequence.tokens = std::span<const int32_t>(&context.back(), 1);
    sequence.cached_tokens = static_cast<int32_t>(context.size()) - 1;
    if (absl::Status status = (*backend)->Forward(batch, logits); !status.ok()) return status;
  }
  return result;
}

}  // namespace kvserve::engine
