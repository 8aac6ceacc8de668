#include "engine/request_validation.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"

namespace kvserve::engine {

namespace {

absl::Status CheckTokenIds(const std::vector<int32_t>& ids, const char* field, int32_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return FieldError(absl::StrCat(field, "[", i, "]"),
                        absl::StrCat("must be in [0, ", vocab_size, "), got ", ids[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRequest(const Request& request, const RequestRules& rules) {
  for (const auto& [ids, field] : {std::pair{&request.prompt_tokens, "prompt_tokens"},
                                   std::pair{&request.turn_separator, "turn_separator"}}) {
    if (absl::Status s = CheckTokenIds(*ids, field, rules.vocab_size); !s.ok()) return s;
  }
  if (request.turn_end_token < -1 || request.turn_end_token >= rules.vocab_size) {
    return FieldError("turn_end_token", absl::StrCat("must be -1 or in [0, ", rules.vocab_size,
                                                     "), got ", request.turn_end_token));
  }
  if (absl::Status s =
          request.sampling.Validate(rules.vocab_size, rules.max_tokens_limit, rules.stop_limits);
      !s.ok()) {
    return NestField("sampling", s);
  }
  if (!request.sampling.stop_strings.empty() && !rules.has_tokenizer) {
    return FieldError("sampling.stop_strings", "needs a model with a tokenizer");
  }
  if (request.cache_salt.size() > static_cast<size_t>(rules.max_cache_salt_bytes)) {
    return FieldError("cache_salt",
                      absl::StrCat("is ", request.cache_salt.size(), " bytes, at most ",
                                   rules.max_cache_salt_bytes, " allowed"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
