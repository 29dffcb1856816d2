// Megatron's preprocess_data for JSONL: each line's text field is tokenized
// into one document of an indexed dataset (PREFIX.bin/.idx), optionally
// followed by the end-of-document token.
#ifndef GLM_DATA_TEXT_PREPROCESS_H_
#define GLM_DATA_TEXT_PREPROCESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace glm {

struct PreprocessOptions {
  std::string input_path;  // JSONL, one document per line; blank lines skipped
  std::string json_key = "text";
  std::string output_prefix;
  bool append_eod = false;
};

struct PreprocessResult {
  int64_t documents = 0;
  int64_t tokens = 0;
  TokenDtype dtype = TokenDtype::kUint16;
};

// A bad line is an error "INPUT:LINE: ..." and leaves no output files.
absl::StatusOr<PreprocessResult> PreprocessJsonl(
    const PreprocessOptions& options, const Tokenizer& tokenizer);

}  // namespace glm

#endif  // GLM_DATA_TEXT_PREPROCESS_H_
