// Quoting what a user sent inside an error message. Inputs can be megabytes
// long or hold terminal control sequences, and error messages end up in logs,
// job reasons and terminals, so a quote is short and printable whatever the
// input.
#ifndef GLM_BASE_QUOTE_H_
#define GLM_BASE_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace glm {

// Enough to recognize a name, a path or a layout in a message.
inline constexpr size_t kQuoteBytes = 80;

// `text` in double quotes, C-escaped (control bytes, quotes, backslashes and
// bytes outside ASCII), cut after its first `max_bytes` bytes with how long it
// was: "tttt..." (40000 bytes).
std::string Quote(absl::string_view text, size_t max_bytes = kQuoteBytes);

// `text` as it is when it is short and printable ASCII (a number, a JSON list
// of numbers), otherwise Quote(text).
std::string Excerpt(absl::string_view text);

}  // namespace glm

#endif  // GLM_BASE_QUOTE_H_
