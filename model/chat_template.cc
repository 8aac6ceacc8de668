#include "model/chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

using Family = ChatTemplateFamily;

struct FamilyText {
  Family family;
  std::string_view name;
  std::string_view separator;  // ends an assistant reply (ChatTemplate::TurnSeparator)
};

constexpr FamilyText kFamilies[] = {
    {Family::kChatMl, "chatml", "<|im_end|>\n"},
    {Family::kPhi4, "phi4", "<|im_end|>"},
    {Family::kLlama2, "llama2", "</s>"},
    {Family::kLlama2Sys, "llama2-sys", "</s>"},
    // The next turn opens with "[INST] "; this variant writes "<s>" before it.
    {Family::kLlama2SysBos, "llama2-sys-bos", "</s><s>"},
    {Family::kLlama2SysStrip, "llama2-sys-strip", "</s>"},
    {Family::kMistralV1, "mistral-v1", "</s>"},
    {Family::kMistralV3, "mistral-v3", "</s>"},
    {Family::kMistralV3Tekken, "mistral-v3-tekken", "</s>"},
    {Family::kMistralV7, "mistral-v7", "</s>"},
    {Family::kLlama3, "llama3", "<|eot_id|>"},
    {Family::kPhi3, "phi3", "<|end|>\n"},
    {Family::kGemma, "gemma", "<end_of_turn>\n"},
    {Family::kDeepSeek, "deepseek", "\n<|EOT|>\n"},
    {Family::kDeepSeek3, "deepseek3", "<｜end▁of▁sentence｜>"},
};

const FamilyText& TextOf(Family family) {
  for (const FamilyText& f : kFamilies) {
    if (f.family == family) return f;
  }
  return kFamilies[0];  // unreachable: every enumerator has a row
}

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// The [INST] families: Mistral's official templates carry markers of their own; the
// rest are Llama 2 variants told apart by how they treat system text, BOS and spaces.
Family DetectInstFamily(std::string_view t) {
  auto has = [t](std::string_view s) { return Contains(t, s); };
  if (has("[SYSTEM_PROMPT]")) return Family::kMistralV7;
  if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
    if (has(" [INST]")) return Family::kMistralV1;
    if (has("\"[INST]\"")) return Family::kMistralV3Tekken;
    return Family::kMistralV3;
  }
  if (has("content.strip()")) return Family::kLlama2SysStrip;
  if (has("bos_token + '[INST]")) return Family::kLlama2SysBos;
  if (has("<<SYS>>")) return Family::kLlama2Sys;
  return Family::kLlama2;
}

// Appends segments, merging neighbours of the same kind.
class SegmentWriter {
 public:
  void Template(std::string_view text) { Add(text, false); }
  void Content(std::string_view text) { Add(text, true); }
  std::vector<ChatSegment> Take() { return std::move(segments_); }

 private:
  void Add(std::string_view text, bool is_content) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().is_content == is_content) {
      segments_.back().text.append(text);
    } else {
      segments_.push_back({std::string(text), is_content});
    }
  }
  std::vector<ChatSegment> segments_;
};

// ASCII whitespace trimmed from both ends (Python's str.strip() on ASCII text; Jinja's
// trim filter).
std::string_view Trim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

// Families that write each message as its role's opening text, the content and the
// role's closing text, and end with a fixed generation prompt.
struct Frame {
  std::string_view open;
  std::string_view close;
};
struct FramedTurns {
  Family family;
  Frame system, user, assistant;
  bool trim_content;
  std::string_view generation_prompt;
};

constexpr FramedTurns kFramedFamilies[] = {
    {Family::kChatMl,
     {"<|im_start|>system\n", "<|im_end|>\n"},
     {"<|im_start|>user\n", "<|im_end|>\n"},
     {"<|im_start|>assistant\n", "<|im_end|>\n"},
     false,
     "<|im_start|>assistant\n"},
    {Family::kPhi4,
     {"<|im_start|>system<|im_sep|>", "<|im_end|>"},
     {"<|im_start|>user<|im_sep|>", "<|im_end|>"},
     {"<|im_start|>assistant<|im_sep|>", "<|im_end|>"},
     false,
     "<|im_start|>assistant<|im_sep|>"},
    {Family::kLlama3,
     {"<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>"},
     {"<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"},
     {"<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
     true,
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {Family::kPhi3,
     {"<|system|>\n", "<|end|>\n"},
     {"<|user|>\n", "<|end|>\n"},
     {"<|assistant|>\n", "<|end|>\n"},
     false,
     "<|assistant|>\n"},
    // Mistral v7's user turn ends with [/INST]: no generation prompt.
    {Family::kMistralV7,
     {"[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]"},
     {"[INST] ", "[/INST]"},
     {" ", "</s>"},
     false,
     ""},
    {Family::kDeepSeek,
     {"", ""},
     {"### Instruction:\n", "\n"},
     {"### Response:\n", "\n<|EOT|>\n"},
     false,
     "### Response:\n"},
    {Family::kDeepSeek3,
     {"", "\n\n"},
     {"<｜User｜>", ""},
     {"<｜Assistant｜>", "<｜end▁of▁sentence｜>"},
     false,
     "<｜Assistant｜>"},
};

const FramedTurns* FramesOf(Family family) {
  for (const FramedTurns& f : kFramedFamilies) {
    if (f.family == family) return &f;
  }
  return nullptr;
}

void RenderFramed(const FramedTurns& f, std::span<const ChatMessage> messages, bool add_gen,
                  SegmentWriter& w) {
  for (const ChatMessage& m : messages) {
    const Frame& frame = m.role == "system" ? f.system : m.role == "user" ? f.user : f.assistant;
    w.Template(frame.open);
    w.Content(f.trim_content ? Trim(m.content) : std::string_view(m.content));
    w.Template(frame.close);
  }
  if (add_gen) w.Template(f.generation_prompt);
}

// Llama 2: the conversation starts inside an [INST] block; an assistant reply closes it
// and the next message opens another.
void RenderLlama2(Family family, std::span<const ChatMessage> messages, SegmentWriter& w) {
  const bool system_blocks = family != Family::kLlama2;
  const bool bos_inside = family == Family::kLlama2SysBos;
  const bool strip = family == Family::kLlama2SysStrip;
  bool inside_turn = true;
  w.Template("[INST] ");
  for (const ChatMessage& m : messages) {
    const std::string_view content = strip ? Trim(m.content) : std::string_view(m.content);
    if (!inside_turn) {
      inside_turn = true;
      w.Template(bos_inside ? "<s>[INST] " : "[INST] ");
    }
    if (m.role == "system") {
      if (system_blocks) w.Template("<<SYS>>\n");
      w.Content(content);
      w.Template(system_blocks ? "\n<</SYS>>\n\n" : "\n");
    } else if (m.role == "user") {
      w.Content(content);
      w.Template(" [/INST]");
    } else {
      w.Content(content);
      w.Template("</s>");
      inside_turn = false;
    }
  }
}

// Mistral v1/v3/v3-tekken: like Llama 2 but every turn opens its own [INST] block and
// the spaces around the markers differ by version.
void RenderMistral(Family family, std::span<const ChatMessage> messages, SegmentWriter& w) {
  const std::string_view lead = family == Family::kMistralV1 ? " " : "";
  const std::string_view trail = family == Family::kMistralV3Tekken ? "" : " ";
  const bool trim_reply = family == Family::kMistralV3;
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      w.Template(std::string(lead) + "[INST]" + std::string(trail));
      inside_turn = true;
    }
    if (m.role == "system") {
      w.Content(m.content);
      w.Template("\n\n");
    } else if (m.role == "user") {
      w.Content(m.content);
      w.Template(std::string(lead) + "[/INST]");
    } else {
      w.Template(trail);
      w.Content(trim_reply ? Trim(m.content) : std::string_view(m.content));
      w.Template("</s>");
      inside_turn = false;
    }
  }
}

// Gemma has no system role: a system message's text opens the next user turn.
void RenderGemma(std::span<const ChatMessage> messages, bool add_gen, SegmentWriter& w) {
  std::string_view pending_system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      pending_system = Trim(m.content);
      continue;
    }
    const bool is_model = m.role == "assistant";
    w.Template(is_model ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
    if (!pending_system.empty() && !is_model) {
      w.Content(pending_system);
      w.Template("\n\n");
      pending_system = {};
    }
    w.Content(Trim(m.content));
    w.Template("<end_of_turn>\n");
  }
  if (add_gen) w.Template("<start_of_turn>model\n");
}

}  // namespace

std::string_view ChatTemplateFamilyName(ChatTemplateFamily family) { return TextOf(family).name; }

std::optional<ChatTemplateFamily> ChatTemplateFamilyFromName(std::string_view name) {
  for (const FamilyText& f : kFamilies) {
    if (f.name == name) return f.family;
  }
  return std::nullopt;
}

std::string ChatTemplateFamilyNames() {
  std::string names;
  for (const FamilyText& f : kFamilies) {
    if (!names.empty()) names += ", ";
    names += f.name;
  }
  return names;
}

std::optional<ChatTemplateFamily> DetectChatTemplateFamily(std::string_view t) {
  auto has = [t](std::string_view s) { return Contains(t, s); };
  if (has("<|im_start|>")) return has("<|im_sep|>") ? Family::kPhi4 : Family::kChatMl;
  if (t.starts_with("mistral") || has("[INST]")) return DetectInstFamily(t);
  if (has("<|assistant|>") && has("<|end|>")) return Family::kPhi3;
  if (has("<start_of_turn>")) return Family::kGemma;
  if (has("### Instruction:") && has("<|EOT|>")) return Family::kDeepSeek;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return Family::kLlama3;
  if (has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")) {
    return Family::kDeepSeek3;
  }
  return std::nullopt;
}

std::string JoinChatSegments(std::span<const ChatSegment> segments) {
  std::string out;
  for (const ChatSegment& s : segments) out.append(s.text);
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view jinja) {
  if (jinja.empty()) {
    return absl::FailedPreconditionError(
        "the model has no chat template (tokenizer.chat_template); send prompt text instead");
  }
  const std::optional<ChatTemplateFamily> family = DetectChatTemplateFamily(jinja);
  if (!family.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model's chat template (tokenizer.chat_template, ", jinja.size(),
        " bytes) is of no supported family (chatml, llama2, mistral, llama3, phi3, phi4, gemma, "
        "deepseek, deepseek3); send prompt text instead"));
  }
  return ChatTemplate(*family);
}

std::string_view ChatTemplate::TurnSeparator() const { return TextOf(family_).separator; }

absl::StatusOr<std::vector<ChatSegment>> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                              bool add_generation_prompt) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role must be \"system\", \"user\" or \"assistant\""));
    }
  }
  SegmentWriter w;
  if (const FramedTurns* frames = FramesOf(family_); frames != nullptr) {
    RenderFramed(*frames, messages, add_generation_prompt, w);
  } else if (family_ == Family::kGemma) {
    RenderGemma(messages, add_generation_prompt, w);
  } else if (family_ == Family::kMistralV1 || family_ == Family::kMistralV3 ||
             family_ == Family::kMistralV3Tekken) {
    RenderMistral(family_, messages, w);
  } else {
    RenderLlama2(family_, messages, w);  // the four Llama 2 variants
  }
  return w.Take();
}

}  // namespace kvserve::model
