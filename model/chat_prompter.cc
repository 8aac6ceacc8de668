#include "model/chat_prompter.h"

#include <utility>

namespace kvserve::model {

ChatPrompter::ChatPrompter(const Tokenizer& tokenizer, std::optional<ChatTemplateFamily> family)
    : template_(family.has_value() ? absl::StatusOr<ChatTemplate>(ChatTemplate(*family))
                                   : ChatTemplate::FromJinja(tokenizer.vocab().chat_template)),
      encoder_(tokenizer) {
  if (!template_.ok()) return;
  turn_separator_ = encoder_.EncodeTemplateText(template_->TurnSeparator());
  const Vocabulary& v = tokenizer.vocab();
  for (int32_t id : turn_separator_) {
    if (v.kinds[id] == TokenKind::kControl || v.kinds[id] == TokenKind::kUserDefined) {
      turn_end_token_ = id;
      break;
    }
  }
}

std::string_view ChatPrompter::family_name() const {
  return template_.ok() ? ChatTemplateFamilyName(template_->family()) : std::string_view();
}

absl::StatusOr<ChatPrompter::Prompt> ChatPrompter::Encode(
    std::span<const ChatMessage> messages) const {
  if (!template_.ok()) return template_.status();
  absl::StatusOr<std::vector<ChatSegment>> segments =
      template_->Render(messages, /*add_generation_prompt=*/true);
  if (!segments.ok()) return segments.status();
  return Prompt{encoder_.Encode(*segments), turn_separator_, turn_end_token_};
}

}  // namespace kvserve::model
