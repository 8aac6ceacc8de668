// INVALID_ARGUMENT statuses that name the request field at fault in a form a program
// can read: the message is "<field> <reason>" for people, and the field path travels
// as a status payload, so a layer that speaks another schema (the gRPC service) can
// rename it without parsing messages.
//
// Field paths are those of engine::Request: "prompt_tokens[3]", "cache_salt",
// "sampling.top_p", "sampling.stop_strings[0]" (an index in brackets, members with dots).
#ifndef KVSERVE_ENGINE_FIELD_ERROR_H_
#define KVSERVE_ENGINE_FIELD_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve::engine {

// INVALID_ARGUMENT with message "<field> <reason>" and the field path as payload.
absl::Status FieldError(absl::string_view field, absl::string_view reason);

// The field path of a FieldError, or nullopt for any other status.
std::optional<std::string> ErrorField(const absl::Status& status);

// The reason of a FieldError (its message without the leading field path).
std::string ErrorReason(const absl::Status& status);

// `status` with its field path (and message) prefixed by `parent` + "." ; other
// statuses unchanged. For a validator of a nested struct: FieldError("top_p", ...)
// becomes "sampling.top_p".
absl::Status NestField(absl::string_view parent, const absl::Status& status);

}  // namespace kvserve::engine

#endif  // KVSERVE_ENGINE_FIELD_ERROR_H_
