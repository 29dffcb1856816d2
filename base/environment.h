// The process environment's switches and settings (GLM_* variables that
// benches and experiments set for a worker), read with a clear error for a
// value that is not one: a typo must not silently leave a switch at its
// default.
#ifndef GLM_BASE_ENVIRONMENT_H_
#define GLM_BASE_ENVIRONMENT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace glm {

// Whether switch `name` is on: "1" on, "0" off, unset or empty `fallback`;
// any other value an error naming the variable and quoting the value.
absl::StatusOr<bool> EnvironmentSwitch(const char* name, bool fallback = false);

// The whole number `name` holds, at least `minimum`; `fallback` when it is
// unset or empty; any other value an error naming the variable and quoting
// the value.
absl::StatusOr<int64_t> EnvironmentWholeNumber(const char* name,
                                               int64_t minimum,
                                               int64_t fallback);

}  // namespace glm

#endif  // GLM_BASE_ENVIRONMENT_H_
