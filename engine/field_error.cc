#include "engine/field_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

constexpr char kFieldPayloadUrl[] = "type.kvserve/engine.FieldError";

}  // namespace

absl::Status FieldError(absl::string_view field, absl::string_view reason) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(field, " ", reason));
  status.SetPayload(kFieldPayloadUrl, absl::Cord(field));
  return status;
}

std::optional<std::string> ErrorField(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return std::nullopt;
  auto field = status.GetPayload(kFieldPayloadUrl);  // absl::optional<absl::Cord>
  if (!field.has_value()) return std::nullopt;
  return std::string(*field);
}

std::string ErrorReason(const absl::Status& status) {
  const std::optional<std::string> field = ErrorField(status);
  absl::string_view message = status.message();
  if (field.has_value() && message.size() > field->size() &&
      message.substr(0, field->size()) == *field) {
    message.remove_prefix(field->size() + 1);  // the field and its space
  }
  return std::string(message);
}

absl::Status NestField(absl::string_view parent, const absl::Status& status) {
  const std::optional<std::string> field = ErrorField(status);
  if (!field.has_value()) return status;
  return FieldError(absl::StrCat(parent, ".", *field), ErrorReason(status));
}

}  // namespace kvserve::engine
