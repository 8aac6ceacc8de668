// Chat templates: recognises the family of a model's `tokenizer.chat_template` (a Jinja
// text) by distinctive substrings and renders conversations in that family natively, as
// llama.cpp's built-in renderer (llm_chat_apply_template) does; no Jinja is evaluated, so
// a template's extras (default system prompts, dates, tool blocks) are not reproduced.
//
// Rendering produces segments, not one string: template text (which may spell control
// tokens such as "<|im_end|>") and message content (which never does: a user who types
// "<|im_end|>" gets those characters, not the token). See model/chat_encoding.h.
//
// Sessions: for a conversation `h` ending with a user message, an assistant message
// with content `c` and further messages `n`, in every family
//   Render(h + [assistant c] + n, g) == Render(h, true) + r + TurnSeparator() + Render(n, g)
// as text, where r is c as the family writes a reply (verbatim; trimmed, or after a
// space, in some). So a session appends each turn's rendering to its history (the reply
// being what the model generated) and the history stays a prefix of the conversation.
#ifndef KVSERVE_MODEL_CHAT_TEMPLATE_H_
#define KVSERVE_MODEL_CHAT_TEMPLATE_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

// The families recognised, named as llama.cpp names them.
enum class ChatTemplateFamily {
  kChatMl,           // "chatml": <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, Hermes)
  kPhi4,             // "phi4": ChatML with <|im_sep|>
  kLlama2,           // "llama2": [INST] ... [/INST], no system role
  kLlama2Sys,        // "llama2-sys": with <<SYS>> system blocks
  kLlama2SysBos,     // "llama2-sys-bos": and <s> before every later [INST]
  kLlama2SysStrip,   // "llama2-sys-strip": and content stripped of outer whitespace
  kMistralV1,        // "mistral-v1":  " [INST] ... [/INST]"
  kMistralV3,        // "mistral-v3": "[INST] ...[/INST]", assistant content trimmed
  kMistralV3Tekken,  // "mistral-v3-tekken": "[INST]...[/INST]"
  kMistralV7,        // "mistral-v7": [SYSTEM_PROMPT] blocks
  kLlama3,           // "llama3": <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kPhi3,             // "phi3": <|role|>\n...<|end|>\n
  kGemma,            // "gemma": <start_of_turn>user/model, system merged into the user turn
  kDeepSeek,         // "deepseek": ### Instruction: / ### Response: (DeepSeek Coder)
  kDeepSeek3,        // "deepseek3": <｜User｜> / <｜Assistant｜> (DeepSeek V3, R1 distills)
};

// llama.cpp's name of the family ("chatml", "llama3", ...).
std::string_view ChatTemplateFamilyName(ChatTemplateFamily family);
// The family of that name, or nullopt; and every name, comma-separated (for messages).
std::optional<ChatTemplateFamily> ChatTemplateFamilyFromName(std::string_view name);
std::string ChatTemplateFamilyNames();

// The family of a Jinja chat template, or nullopt when none is recognised. Decided by
// substrings, in llama.cpp's order (e.g. "<|im_start|>" means ChatML, or Phi-4 with
// "<|im_sep|>"; "[INST]" means Llama 2 or Mistral).
std::optional<ChatTemplateFamily> DetectChatTemplateFamily(std::string_view jinja);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// A piece of rendered text. Template text may contain control-token spellings; content
// is the caller's and must be tokenized as plain text.
struct ChatSegment {
  std::string text;
  bool is_content = false;
};

// The concatenated text of `segments`.
std::string JoinChatSegments(std::span<const ChatSegment> segments);

// Renders conversations in one family. Immutable; thread-safe.
class ChatTemplate {
 public:
  // FAILED_PRECONDITION naming the problem when `jinja` is empty ("the model has no chat
  // template") or of no recognised family.
  static absl::StatusOr<ChatTemplate> FromJinja(std::string_view jinja);

  explicit ChatTemplate(ChatTemplateFamily family) : family_(family) {}

  ChatTemplateFamily family() const { return family_; }

  // Renders `messages` in order; with `add_generation_prompt`, then the text that opens
  // an assistant reply (families whose user turn already ends with it add nothing).
  // INVALID_ARGUMENT naming "messages" when empty, or "messages[i].role" when a role
  // is not "system", "user" or "assistant" (roles become template text, so no other
  // value is accepted).
  absl::StatusOr<std::vector<ChatSegment>> Render(std::span<const ChatMessage> messages,
                                                  bool add_generation_prompt) const;

  // The template text that ends an assistant reply and separates it from the next
  // Render output (e.g. "<|im_end|>\n"); see the file comment.
  std::string_view TurnSeparator() const;

 private:
  ChatTemplateFamily family_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_CHAT_TEMPLATE_H_
