// What the model trains on in one micro batch: a packed row of token ids split
// into sequences, the labels past each sequence's end and a loss mask.
#ifndef GLM_MODEL_BATCH_H_
#define GLM_MODEL_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/config.h"

namespace glm {

// Token ids of one packed row. cu_seqlens (optional) splits it into sequences
// that never see each other; loss_mask (optional, per token) weights the
// prediction made AT token t (of token t+1) with 0 or 1. last_labels
// (optional, one per sequence) is the token that follows each sequence's last
// input token, so that its last position has a label too: a pretraining
// sample of seq_length + 1 tokens feeds seq_length of them to the model, as
// Megatron's does. Without it a sequence's last position predicts nothing.
struct Batch {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> cu_seqlens;
  std::vector<float> loss_mask;
  std::vector<int32_t> last_labels;

  // Rows of equal or different length, packed one after another.
  static Batch FromSequences(const std::vector<std::vector<int32_t>>& rows);
  // Samples of two or more tokens each: all but a sample's last token are its
  // sequence's inputs, the last one its last position's label.
  static Batch FromSamples(const std::vector<std::vector<int32_t>>& samples);
};

// InvalidArgument naming the first token id or label outside the vocabulary,
// a loss mask whose length is not the batch's, or last labels whose count is
// not the number of sequences.
absl::Status ValidateBatch(const Batch& batch, const ModelConfig& config);

// Sequences of the batch: cu_seqlens' count, or 1 without cu_seqlens.
int64_t SequenceCount(const Batch& batch);

}  // namespace glm

#endif  // GLM_MODEL_BATCH_H_
