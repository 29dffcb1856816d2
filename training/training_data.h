// What the trainer reads: samples by index, each micro batch packed into one
// Batch whose sequences never see each other. Pretraining samples are token
// windows (seq_length + 1 tokens, so every position has a label); SFT samples
// are packed rows with their own sequence boundaries and assistant-only loss
// masks.
#ifndef GLM_TRAINING_TRAINING_DATA_H_
#define GLM_TRAINING_TRAINING_DATA_H_

#include <cstdint>
#include <memory>

#include "data/gpt_dataset.h"
#include "data/packed_sft_dataset.h"
#include "model/glm_model.h"

namespace glm {

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  // Samples [first, first + count) as one packed batch.
  virtual Batch MicroBatch(int64_t first, int64_t count) const = 0;
};

class PretrainData : public TrainingData {
 public:
  explicit PretrainData(std::unique_ptr<TokenSampleDataset> samples)
      : samples_(std::move(samples)) {}
  int64_t size() const override { return samples_->size(); }
  int64_t seq_length() const override { return samples_->seq_length(); }
  Batch MicroBatch(int64_t first, int64_t count) const override;

 private:
  std::unique_ptr<TokenSampleDataset> samples_;
};

class SftData : public TrainingData {
 public:
  explicit SftData(std::unique_ptr<PackedSftDataset> rows)
      : rows_(std::move(rows)) {}
  int64_t size() const override { return rows_->size(); }
  int64_t seq_length() const override { return rows_->seq_length(); }
  Batch MicroBatch(int64_t first, int64_t count) const override;

 private:
  std::unique_ptr<PackedSftDataset> rows_;
};

}  // namespace glm

#endif  // GLM_TRAINING_TRAINING_DATA_H_
