#include "data/tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int32_t>& ids) const {
  static const char* const kNames[] = {kEodPiece,       kPadPiece,
                                       kSystemPiece,    kUserPiece,
                                       kAssistantPiece, kEndPiece};
  std::string text;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(id));
    } else if (id >= kEod && id < kVocabSize) {
      text += kNames[id - kEod];
    } else {
      absl::StrAppend(&text, "<|invalid:", id, "|>");
    }
  }
  return text;
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
SentencePieceTokenizer::Load(const std::string& model_path) {
  std::unique_ptr<SentencePieceTokenizer> tokenizer(
      new SentencePieceTokenizer());
  tokenizer->path_ = model_path;
  const SentencePieceModel& model = tokenizer->model_;
  std::string error;
  if (!tokenizer->model_.Load(model_path, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot load SentencePiece model ", model_path, ": ", error));
  }
  tokenizer->vocab_size_ = model.size();
  tokenizer->eod_ = model.Find(kEodPiece);
  if (tokenizer->eod_ < 0) tokenizer->eod_ = model.eos_id();
  if (tokenizer->eod_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", model_path,
                     " has neither an eos id nor a ", kEodPiece, " piece"));
  }
  tokenizer->pad_ = model.Find(kPadPiece);
  if (tokenizer->pad_ < 0) tokenizer->pad_ = model.pad_id();
  if (tokenizer->pad_ < 0) tokenizer->pad_ = tokenizer->eod_;
  tokenizer->markers_ =
      ChatMarkers{model.Find(kSystemPiece), model.Find(kUserPiece),
                  model.Find(kAssistantPiece), model.Find(kEndPiece)};
  return tokenizer;
}

std::vector<int32_t> SentencePieceTokenizer::Encode(
    std::string_view text) const {
  const std::vector<int> ids = model_.Encode(text);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::Decode(
    const std::vector<int32_t>& ids) const {
  // SentencePiece decodes control pieces (eos, pad) to nothing; they are
  // written out by name so that dataset inspection shows them.
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    text += model_.Decode(run);
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      flush();
      absl::StrAppend(&text, "<|invalid:", id, "|>");
    } else if (model_.IsControl(id)) {
      flush();
      text += model_.Piece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(spec);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
}

}  // namespace glm
