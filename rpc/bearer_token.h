// The shared-secret bearer token every coordinator RPC carries as
// `authorization: Bearer <token>`.
#ifndef GLM_RPC_BEARER_TOKEN_H_
#define GLM_RPC_BEARER_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace glm {

inline constexpr char kAuthorizationHeader[] = "authorization";

// The token file's content without surrounding whitespace; an empty token is an
// error, since it would let anyone in.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// "Bearer <token>".
std::string AuthorizationValue(const std::string& token);

// True when `header` is exactly "Bearer <token>"; compares in constant time so
// the answer's timing does not leak how much of a guess was right.
bool AuthorizationMatches(absl::string_view header, const std::string& token);

}  // namespace glm

#endif  // GLM_RPC_BEARER_TOKEN_H_
