// Turns a conversation into the token ids of a prompt with the model's chat template:
// model/chat_template.h renders, model/chat_encoding.h encodes. The one place the
// service goes from messages to tokens.
#ifndef KVSERVE_MODEL_CHAT_PROMPTER_H_
#define KVSERVE_MODEL_CHAT_PROMPTER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat_encoding.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace kvserve::model {

// Immutable after construction; thread-safe. `tokenizer` must outlive it.
class ChatPrompter {
 public:
  // Detects the family of tokenizer.vocab().chat_template. A model without a template,
  // or with one of no supported family, still gives a prompter: its Encode answers
  // FAILED_PRECONDITION naming the problem.
  // `family` set: render in that family whatever the vocabulary says (a model without
  // a template, or with one misdetected; the server's --chat-template).
  explicit ChatPrompter(const Tokenizer& tokenizer,
                        std::optional<ChatTemplateFamily> family = std::nullopt);

  // The family's name ("chatml", ...), or "" when Encode cannot render.
  std::string_view family_name() const;

  struct Prompt {
    // The rendered conversation followed by the generation prompt, without BOS.
    std::vector<int32_t> tokens;
    // ChatTemplate::TurnSeparator() encoded: what a session puts between its history
    // and `tokens` (engine::Request::turn_separator).
    std::vector<int32_t> turn_separator;
    // The separator's first control (or user-defined) token, e.g. <|im_end|>, or -1: a
    // reply the model ended with it needs only the rest (engine::Request::turn_end_token).
    int32_t turn_end_token = -1;
  };
  // FAILED_PRECONDITION when the model has no usable template; INVALID_ARGUMENT as
  // ChatTemplate::Render.
  absl::StatusOr<Prompt> Encode(std::span<const ChatMessage> messages) const;

 private:
  absl::StatusOr<ChatTemplate> template_;
  ChatEncoder encoder_;
  std::vector<int32_t> turn_separator_;
  int32_t turn_end_token_ = -1;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_CHAT_PROMPTER_H_
