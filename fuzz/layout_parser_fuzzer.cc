// Pipeline layout strings (parallel.layout of a job spec, glmctl layout): any
// string parses or is refused, within the parser's bounds, and a parsed
// layout written out parses back to the same stages.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/layout_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<std::string>> stages = glm::ParseLayout(text);
  if (!stages.ok()) return 0;
  const std::string written = glm::FormatLayout(*stages);
  absl::StatusOr<std::vector<std::string>> again = glm::ParseLayout(written);
  // Every stage of a parsed layout fits the expansion bound, but written out
  // with separators it may exceed the byte bound.
  if (written.size() <= glm::kMaxLayoutBytes &&
      (!again.ok() || *again != *stages)) {
    std::abort();
  }
  return 0;
}
