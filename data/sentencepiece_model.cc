#include "data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace glm {

SentencePieceModel::SentencePieceModel()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceModel::~SentencePieceModel() = default;

bool SentencePieceModel::Load(const std::string& path, std::string* error) {
  const sentencepiece::util::Status status = processor_->Load(path);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceModel::size() const { return processor_->GetPieceSize(); }
int SentencePieceModel::eos_id() const { return processor_->eos_id(); }
int SentencePieceModel::pad_id() const { return processor_->pad_id(); }

int SentencePieceModel::Find(const std::string& piece) const {
  const int id = processor_->PieceToId(piece);
  return processor_->IsUnknown(id) ? -1 : id;
}

bool SentencePieceModel::IsControl(int id) const {
  return processor_->IsControl(id);
}

const std::string& SentencePieceModel::Piece(int id) const {
  return processor_->IdToPiece(id);
}

std::vector<int> SentencePieceModel::Encode(std::string_view text) const {
  std::vector<int> ids;
  processor_->Encode(text, &ids).IgnoreError();  // fails only when unloaded
  return ids;
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids) const {
  std::string text;
  processor_->Decode(ids, &text).IgnoreError();  // fails only when unloaded
  return text;
}

}  // namespace glm
