// Errors of the job-spec rules: INVALID_ARGUMENT whose message starts with the
// field path ("parallel.layout: ...", "training.lr: ...") and states the rule.
#ifndef GLM_JOBSPEC_FIELD_ERROR_H_
#define GLM_JOBSPEC_FIELD_ERROR_H_

#include <string>

#include "absl/status/status.h"

namespace glm {

absl::Status FieldError(const std::string& field, const std::string& rule);

// `status` with `field` in front of its message (OK stays OK).
absl::Status Prefixed(const std::string& field, const absl::Status& status);

}  // namespace glm

#endif  // GLM_JOBSPEC_FIELD_ERROR_H_
