#include "rpc/bearer_token.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "openssl/crypto.h"

namespace glm {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) return content.status();
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

std::string AuthorizationValue(const std::string& token) {
  return absl::StrCat("Bearer ", token);
}

bool AuthorizationMatches(absl::string_view header, const std::string& token) {
  const std::string expected = AuthorizationValue(token);
  if (header.size() != expected.size()) return false;
  return CRYPTO_memcmp(header.data(), expected.data(), expected.size()) == 0;
}

}  // namespace glm
