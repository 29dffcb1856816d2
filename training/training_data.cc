#include "training/training_data.h"

#include <vector>

namespace glm {

Batch PretrainData::MicroBatch(int64_t first, int64_t count) const {
  std::vector<std::vector<int32_t>> rows;
  for (int64_t i = 0; i < count; ++i)
    rows.push_back(samples_->Sample(first + i));
  return Batch::FromSamples(rows);
}

// Rows are appended one after another; their cu_seqlens shift by the tokens
// before them. The model's loss mask is per prediction (token t predicting
// t + 1), which is the row's mask shifted by one inside each sequence.
Batch SftData::MicroBatch(int64_t first, int64_t count) const {
  Batch batch;
  batch.cu_seqlens.push_back(0);
  for (int64_t i = 0; i < count; ++i) {
    const PackedRow row = rows_->Sample(first + i);
    const int32_t offset = static_cast<int32_t>(batch.input_ids.size());
    batch.input_ids.insert(batch.input_ids.end(), row.tokens.begin(),
                           row.tokens.end());
    for (size_t s = 1; s < row.cu_seqlens.size(); ++s) {
      if (row.cu_seqlens[s] > row.cu_seqlens[s - 1]) {
        batch.cu_seqlens.push_back(offset + row.cu_seqlens[s]);
      }
    }
    // Trailing padding outside every sequence becomes a sequence of its own
    // (masked out) so that the row's tokens are all covered.
    const int32_t row_end = static_cast<int32_t>(batch.input_ids.size());
    if (batch.cu_seqlens.back() != row_end) batch.cu_seqlens.push_back(row_end);
    for (uint8_t m : TargetsOf(row, /*shift=*/1).loss_mask) {
      batch.loss_mask.push_back(m);
    }
  }
  return batch;
}

}  // namespace glm
