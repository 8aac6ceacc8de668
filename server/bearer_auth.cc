#include "server/bearer_auth.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvserve::server {
namespace {

constexpr std::string_view kBearerPrefix = "Bearer ";

// Equal in time that depends only on the lengths, not on where the bytes differ.
bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<BearerAuth> BearerAuth::Parse(std::string_view text) {
  BearerAuth auth;
  int line_number = 0;
  // This Abseil's string_view is its own type, not std::string_view.
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("auth tokens: line ", line_number,
                                                     ": expected \"TOKEN NAME\", got ",
                                                     fields.size(), " field(s)"));
    }
    auth.entries_.push_back(Entry{std::string(fields[0]), std::string(fields[1])});
  }
  if (auth.entries_.empty()) {
    return absl::InvalidArgumentError("auth tokens: no token listed");
  }
  return auth;
}

absl::StatusOr<BearerAuth> BearerAuth::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the auth tokens file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<BearerAuth> auth = Parse(text.str());
  if (!auth.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", auth.status().message()));
  }
  return auth;
}

std::optional<std::string> BearerAuth::Authenticate(std::string_view authorization) const {
  if (authorization.substr(0, kBearerPrefix.size()) != kBearerPrefix) return std::nullopt;
  const std::string_view token = authorization.substr(kBearerPrefix.size());
  std::optional<std::string> name;
  for (const Entry& entry : entries_) {  // no early exit: every token is compared
    if (ConstantTimeEqual(token, entry.token)) name = entry.name;
  }
  return name;
}

absl::StatusOr<std::string> FirstTokenOfFile(const std::string& path) {
  absl::StatusOr<BearerAuth> auth = BearerAuth::FromFile(path);
  if (!auth.ok()) return auth.status();
  return auth->first_token();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::string line;
  std::getline(in, line);
  const std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no token on its first line"));
  }
  return token;
}

}  // namespace kvserve::server
