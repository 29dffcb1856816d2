#include "data/text_preprocess.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

bool IsBlank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

absl::StatusOr<PreprocessResult> PreprocessJsonl(
    const PreprocessOptions& options, const Tokenizer& tokenizer) {
  std::ifstream in(options.input_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", options.input_path));
  }
  PreprocessResult result;
  result.dtype = DtypeForVocabSize(tokenizer.vocab_size());
  auto builder =
      IndexedDatasetBuilder::Create(options.output_prefix, result.dtype);
  if (!builder.ok()) return builder.status();
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (IsBlank(line)) continue;
    auto error = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.input_path, ":", line_number, ": ", what));
    };
    const nlohmann::json object =
        nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) return error("not JSON");
    if (!object.is_object()) return error("expected a JSON object");
    auto text = object.find(options.json_key);
    if (text == object.end() || !text->is_string()) {
      return error(absl::StrCat("field \"", options.json_key,
                                "\" missing or not a string"));
    }
    std::vector<int32_t> ids = tokenizer.Encode(text->get<std::string>());
    if (options.append_eod) ids.push_back(tokenizer.eod_id());
    if (absl::Status status = (*builder)->AddDocument(ids); !status.ok()) {
      return error(std::string(status.message()));
    }
    ++result.documents;
    result.tokens += ids.size();
  }
  if (in.bad()) {
    return absl::InternalError(
        absl::StrCat("error reading ", options.input_path));
  }
  if (absl::Status status = (*builder)->Finish(); !status.ok()) return status;
  return result;
}

}  // namespace glm
