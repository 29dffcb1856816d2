// A test dataset of token ids from a fixed integer hash of (sample,
// position): every sample differs, so a rank reading the wrong samples
// changes the losses, and every run reads the same ids.
#ifndef GLM_TRAINING_HASHED_TOKEN_DATASET_H_
#define GLM_TRAINING_HASHED_TOKEN_DATASET_H_

#include <cstdint>
#include <vector>

#include "training/training_data.h"

namespace glm {

class HashedTokenDataset : public TokenSampleDataset {
 public:
  explicit HashedTokenDataset(int64_t seq_length) : seq_length_(seq_length) {}
  int64_t size() const override { return 1024; }
  int64_t seq_length() const override { return seq_length_; }
  // seq_length + 1 ids below 509 (every preset's vocabulary is larger).
  std::vector<int32_t> Sample(int64_t index) const override {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i <= seq_length_; ++i) {
      const uint64_t h = (index * 2654435761u + i * 40503u) ^ (index >> 3);
      ids.push_back(static_cast<int32_t>(h % 509));
    }
    return ids;
  }

 private:
  int64_t seq_length_;
};

}  // namespace glm

#endif  // GLM_TRAINING_HASHED_TOKEN_DATASET_H_
