#include "engine/request_validation.h"

#include "absl/strings/str_cat.h"
#include "engine/field_error.h"

namespace kvserve::engine {

absl::Status ValidateRequest(const Request& request, const RequestRules& rules) {
  for (size_t i = 0; i < request.prompt_tokens.size(); ++i) {
    const int32_t t = request.prompt_tokens[i];
    if (t < 0 || t >= rules.vocab_size) {
      return FieldError(absl::StrCat("prompt_tokens[", i, "]"),
                        absl::StrCat("must be in [0, ", rules.vocab_size, "), got ", t));
    }
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
