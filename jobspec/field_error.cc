#include "jobspec/field_error.h"

#include "absl/strings/str_cat.h"

namespace glm {

absl::Status FieldError(const std::string& field, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule));
}

absl::Status Prefixed(const std::string& field, const absl::Status& status) {
  if (status.ok()) return status;
  return FieldError(field, std::string(status.message()));
}

}  // namespace glm
