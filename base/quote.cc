#include "base/quote.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace glm {

std::string Quote(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, max_bytes)),
                      "...\" (", text.size(), " bytes)");
}

std::string Excerpt(absl::string_view text) {
  if (text.size() > kQuoteBytes) return Quote(text);
  for (char c : text) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) return Quote(text);
  }
  return std::string(text);
}

}  // namespace glm
