#include "base/environment.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"

namespace glm {

absl::StatusOr<bool> EnvironmentSwitch(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  const std::string text = value == nullptr ? "" : value;
  if (text.empty()) return fallback;
  if (text == "0") return false;
  if (text == "1") return true;
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be 1 (on) or 0 (off), got ", Quote(text)));
}

absl::StatusOr<int64_t> EnvironmentWholeNumber(const char* name,
                                               int64_t minimum,
                                               int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  int64_t number = 0;
  if (!absl::SimpleAtoi(value, &number) || number < minimum) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a whole number of at least ", minimum,
                     ", got ", Quote(value)));
  }
  return number;
}

}  // namespace glm
