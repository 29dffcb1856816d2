#include "model/batch.h"

#include <cassert>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

absl::Status CheckIds(const std::vector<int32_t>& ids, const char* name,
                      int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "[", i, "] = ", ids[i],
                       " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t SequenceCount(const Batch& batch) {
  return batch.cu_seqlens.empty()
             ? 1
             : static_cast<int64_t>(batch.cu_seqlens.size()) - 1;
}

absl::Status ValidateBatch(const Batch& batch, const ModelConfig& config) {
  const int64_t n = static_cast<int64_t>(batch.input_ids.size());
  if (n == 0) return absl::InvalidArgumentError("batch has no tokens");
  if (absl::Status ids =
          CheckIds(batch.input_ids, "input_ids", config.vocab_size);
      !ids.ok()) {
    return ids;
  }
  if (absl::Status labels =
          CheckIds(batch.last_labels, "last_labels", config.vocab_size);
      !labels.ok()) {
    return labels;
  }
  if (!batch.loss_mask.empty() &&
      static_cast<int64_t>(batch.loss_mask.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_mask has ", batch.loss_mask.size(), " entries for ",
                     n, " tokens"));
  }
  if (!batch.last_labels.empty() &&
      static_cast<int64_t>(batch.last_labels.size()) != SequenceCount(batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("last_labels has ", batch.last_labels.size(),
                     " entries for ", SequenceCount(batch), " sequences"));
  }
  return absl::OkStatus();
}

Batch Batch::FromSequences(const std::vector<std::vector<int32_t>>& rows) {
  Batch batch;
  batch.cu_seqlens.push_back(0);
  for (const std::vector<int32_t>& row : rows) {
    batch.input_ids.insert(batch.input_ids.end(), row.begin(), row.end());
    batch.cu_seqlens.push_back(static_cast<int32_t>(batch.input_ids.size()));
  }
  return batch;
}

Batch Batch::FromSamples(const std::vector<std::vector<int32_t>>& samples) {
  Batch batch;
  batch.cu_seqlens.push_back(0);
  for (const std::vector<int32_t>& sample : samples) {
    assert(sample.size() >= 2);
    batch.input_ids.insert(batch.input_ids.end(), sample.begin(),
                           sample.end() - 1);
    batch.cu_seqlens.push_back(static_cast<int32_t>(batch.input_ids.size()));
    batch.last_labels.push_back(sample.back());
  }
  return batch;
}

}  // namespace glm
