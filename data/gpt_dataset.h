// Pretraining samples in Megatron's GPTDataset manner. The documents
// (sequences) of an indexed dataset are laid end to end in a shuffled order,
// one fresh shuffle per epoch, and the stream is cut into samples of
// seq_length + 1 tokens: sample j is stream tokens
// [j * seq_length, j * seq_length + seq_length], so consecutive samples share
// one token, the last label of one being the first input of the next. The
// samples are then visited in a shuffled order. Documents are concatenated as
// stored: preprocess with --append-eod (Megatron's convention) so that each
// ends with the end-of-document token.
//
// Everything is a pure function of the data and the seed, so resuming after
// `consumed_samples` samples is reading from Sample(consumed_samples) on.
#ifndef GLM_DATA_GPT_DATASET_H_
#define GLM_DATA_GPT_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/indexed_dataset.h"

namespace glm {

struct GptDatasetConfig {
  int64_t seq_length = 0;
  // The dataset holds at least this many samples; epochs repeat as needed.
  int64_t num_samples = 0;
  uint64_t seed = 0;
};

// What a pretraining loop reads: fixed-length token samples by index.
class TokenSampleDataset {
 public:
  virtual ~TokenSampleDataset() = default;
  // Samples 0 .. size() - 1 exist; size() >= the configured num_samples.
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  // seq_length + 1 token ids: inputs are [0, seq_length), labels are
  // [1, seq_length + 1).
  virtual std::vector<int32_t> Sample(int64_t index) const = 0;
};

class GptDataset : public TokenSampleDataset {
 public:
  static absl::StatusOr<std::unique_ptr<GptDataset>> Build(
      std::shared_ptr<const IndexedDataset> documents,
      const GptDatasetConfig& config);

  int64_t size() const override { return shuffle_index_.size(); }
  int64_t seq_length() const override { return config_.seq_length; }
  std::vector<int32_t> Sample(int64_t index) const override;

  int64_t epochs() const { return epochs_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  GptDataset(std::shared_ptr<const IndexedDataset> documents,
             const GptDatasetConfig& config);
  void BuildIndices();

  std::shared_ptr<const IndexedDataset> documents_;
  GptDatasetConfig config_;
  int64_t epochs_ = 0;
  int64_t tokens_per_epoch_ = 0;
  // Document ids in stream order, one shuffled copy per epoch.
  std::vector<int32_t> document_index_;
  // Where sample j starts: position in document_index_ and token offset.
  std::vector<int64_t> sample_document_;
  std::vector<int32_t> sample_offset_;
  // Sample(i) is stream sample shuffle_index_[i].
  std::vector<int64_t> shuffle_index_;
};

// Megatron's BlendedDataset: sample i comes from the component whose share
// so far falls furthest below its weight, so every prefix of the samples
// follows the weights as closely as whole samples allow.
class BlendedDataset : public TokenSampleDataset {
 public:
  struct Component {
    double weight = 0;
    std::shared_ptr<const IndexedDataset> documents;
  };
  // Weights must be positive; they are normalised. Each component is a
  // GptDataset with `config`'s seed and exactly as many samples as the blend
  // takes from it.
  static absl::StatusOr<std::unique_ptr<BlendedDataset>> Build(
      const std::vector<Component>& components, const GptDatasetConfig& config);

  int64_t size() const override { return dataset_index_.size(); }
  int64_t seq_length() const override { return seq_length_; }
  std::vector<int32_t> Sample(int64_t index) const override;

  // Component that sample i comes from.
  int dataset_index(int64_t index) const { return dataset_index_[index]; }

 private:
  BlendedDataset() = default;

  int64_t seq_length_ = 0;
  std::vector<std::unique_ptr<GptDataset>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// Megatron's blending indices: for each of `size` samples, the component
// index and the sample index within that component.
void BuildBlendingIndices(const std::vector<double>& normalized_weights,
                          int64_t size, std::vector<int16_t>* dataset_index,
                          std::vector<int64_t>* dataset_sample_index);

// Megatron's --data-path: "PREFIX" or "W1 PREFIX1 W2 PREFIX2 ...". Opens the
// indexed datasets and builds a GptDataset or a BlendedDataset.
absl::StatusOr<std::unique_ptr<TokenSampleDataset>> BuildPretrainDataset(
    const std::string& data_path, const GptDatasetConfig& config);

}  // namespace glm

#endif  // GLM_DATA_GPT_DATASET_H_
