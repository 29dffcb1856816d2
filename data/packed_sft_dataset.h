// Packed SFT rows on disk and back. `glmctl data pack --output-prefix=P`
// writes three Megatron indexed datasets with one document per row:
//   P_tokens      token ids (uint16 or int32 by vocabulary size)
//   P_loss_mask   uint8, 1 where the token is a supervised target
//   P_cu_seqlens  int32 sequence offsets within the row (0 ... row length)
// PackedSftDataset reads them back, checks they agree, and hands out rows in
// a seeded per-epoch shuffled order, so a training loop resumes from
// consumed_samples exactly as with GptDataset.
#ifndef GLM_DATA_PACKED_SFT_DATASET_H_
#define GLM_DATA_PACKED_SFT_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/indexed_dataset.h"
#include "data/sequence_packing.h"
#include "data/tokenizer.h"

namespace glm {

std::string PackedTokensPrefix(const std::string& prefix);
std::string PackedLossMaskPrefix(const std::string& prefix);
std::string PackedCuSeqlensPrefix(const std::string& prefix);

absl::Status WritePackedSft(const std::string& prefix,
                            const std::vector<Pack>& packs,
                            TokenDtype token_dtype);

struct PackChatResult {
  int64_t conversations = 0;
  PackingStats stats;
};

// `glmctl data pack`: reads chat JSONL, renders each conversation with the
// tokenizer's chat template, packs to seq_length with pad_seq_to_mult
// (padding with the tokenizer's pad id) and writes PREFIX_tokens,
// PREFIX_loss_mask and PREFIX_cu_seqlens.
absl::StatusOr<PackChatResult> PackChatJsonl(const std::string& chat_jsonl,
                                             const Tokenizer& tokenizer,
                                             int64_t seq_length,
                                             int64_t pad_seq_to_mult,
                                             const std::string& prefix);

struct PackedRow {
  std::vector<int32_t> tokens;      // the row, seq_length tokens
  std::vector<uint8_t> loss_mask;   // 1 where tokens[t] is a target
  std::vector<int32_t> cu_seqlens;  // 0, ..., seq_length
};

// Next-token targets of a row: labels[p] = tokens[p + shift] and
// loss_mask[p] = row.loss_mask[p + shift] when p + shift lies in the same
// sequence as p; otherwise labels[p] = 0 and loss_mask[p] = 0. shift 1 is
// the LM loss; shift k + 1 is MTP depth k.
struct ShiftedTargets {
  std::vector<int32_t> labels;
  std::vector<uint8_t> loss_mask;
};
ShiftedTargets TargetsOf(const PackedRow& row, int shift = 1);

class PackedSftDataset {
 public:
  // size() >= num_samples: as many epochs of the rows as that takes, each
  // epoch in its own order drawn from `seed`.
  static absl::StatusOr<std::unique_ptr<PackedSftDataset>> Open(
      const std::string& prefix, int64_t num_samples, uint64_t seed);

  int64_t rows() const { return tokens_->document_count(); }
  int64_t seq_length() const { return seq_length_; }
  int64_t size() const { return order_.size(); }
  // Row `order[index]`; index in [0, size()).
  PackedRow Sample(int64_t index) const { return Row(order_[index]); }
  PackedRow Row(int64_t row) const;

 private:
  PackedSftDataset() = default;
  absl::Status Validate();

  std::unique_ptr<IndexedDataset> tokens_;
  std::unique_ptr<IndexedDataset> loss_mask_;
  std::unique_ptr<IndexedDataset> cu_seqlens_;
  int64_t seq_length_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace glm

#endif  // GLM_DATA_PACKED_SFT_DATASET_H_
