#include "data/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/seeded_shuffle.h"

namespace glm {
namespace {

absl::Status ValidateConfig(const GptDatasetConfig& config) {
  if (config.seq_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length must be positive, got ", config.seq_length));
  }
  if (config.num_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must be positive, got ", config.num_samples));
  }
  return absl::OkStatus();
}

// Samples a stream of `tokens` tokens holds: each needs seq_length + 1 tokens
// and consecutive samples share one.
int64_t SamplesInStream(int64_t tokens, int64_t seq_length) {
  return tokens < 1 ? 0 : (tokens - 1) / seq_length;
}

}  // namespace

// ---------------------------------------------------------------- GptDataset

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> documents,
                       const GptDatasetConfig& config)
    : documents_(std::move(documents)), config_(config) {}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::Build(
    std::shared_ptr<const IndexedDataset> documents,
    const GptDatasetConfig& config) {
  if (absl::Status status = ValidateConfig(config); !status.ok()) {
    return status;
  }
  if (documents->sequence_count() > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(documents->prefix(), " has more than 2^31 documents"));
  }
  const int64_t tokens = documents->element_count();
  if (SamplesInStream(tokens, config.seq_length) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(documents->prefix(), " has ", tokens,
                     " tokens, fewer than one sample of seq_length + 1 = ",
                     config.seq_length + 1));
  }
  std::unique_ptr<GptDataset> dataset(
      new GptDataset(std::move(documents), config));
  dataset->tokens_per_epoch_ = tokens;
  dataset->epochs_ = 1;
  while (SamplesInStream(dataset->epochs_ * tokens, config.seq_length) <
         config.num_samples) {
    ++dataset->epochs_;
  }
  dataset->BuildIndices();
  return dataset;
}

void GptDataset::BuildIndices() {
  std::mt19937_64 rng(config_.seed);
  const int32_t document_count = documents_->sequence_count();
  document_index_.reserve(epochs_ * document_count);
  std::vector<int32_t> epoch_order(document_count);
  for (int64_t epoch = 0; epoch < epochs_; ++epoch) {
    std::iota(epoch_order.begin(), epoch_order.end(), 0);
    SeededShuffle(rng, &epoch_order);
    document_index_.insert(document_index_.end(), epoch_order.begin(),
                           epoch_order.end());
  }

  const int64_t samples =
      SamplesInStream(epochs_ * tokens_per_epoch_, config_.seq_length);
  sample_document_.reserve(samples);
  sample_offset_.reserve(samples);
  int64_t position = 0;  // in document_index_
  int64_t offset = 0;    // tokens into that document
  for (int64_t sample = 0; sample < samples; ++sample) {
    sample_document_.push_back(position);
    sample_offset_.push_back(offset);
    // Advance seq_length tokens; a start never sits at a document's end.
    int64_t remaining = config_.seq_length;
    while (remaining > 0) {
      const int64_t available =
          documents_->sequence_length(document_index_[position]) - offset;
      if (available > remaining) {
        offset += remaining;
        remaining = 0;
      } else {
        remaining -= available;
        ++position;
        offset = 0;
        if (position == static_cast<int64_t>(document_index_.size())) break;
      }
    }
  }

  shuffle_index_.resize(samples);
  std::iota(shuffle_index_.begin(), shuffle_index_.end(), 0);
  SeededShuffle(rng, &shuffle_index_);
}

std::vector<int32_t> GptDataset::Sample(int64_t index) const {
  const int64_t sample = shuffle_index_[index];
  int64_t position = sample_document_[sample];
  int64_t offset = sample_offset_[sample];
  std::vector<int32_t> tokens(config_.seq_length + 1);
  int64_t filled = 0;
  while (filled < static_cast<int64_t>(tokens.size())) {
    const int32_t document = document_index_[position];
    const int64_t take = std::min<int64_t>(
        documents_->sequence_length(document) - offset, tokens.size() - filled);
    documents_->Read(document, offset, take, tokens.data() + filled);
    filled += take;
    ++position;
    offset = 0;
  }
  return tokens;
}

// ---------------------------------------------------------------- blending

void BuildBlendingIndices(const std::vector<double>& normalized_weights,
                          int64_t size, std::vector<int16_t>* dataset_index,
                          std::vector<int64_t>* dataset_sample_index) {
  std::vector<int64_t> taken(normalized_weights.size(), 0);
  dataset_index->resize(size);
  dataset_sample_index->resize(size);
  for (int64_t sample = 0; sample < size; ++sample) {
    const double target = std::max(static_cast<double>(sample), 1.0);
    size_t best = 0;
    double best_error = normalized_weights[0] * target - taken[0];
    for (size_t d = 1; d < normalized_weights.size(); ++d) {
      const double error = normalized_weights[d] * target - taken[d];
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    (*dataset_index)[sample] = static_cast<int16_t>(best);
    (*dataset_sample_index)[sample] = taken[best]++;
  }
}

absl::StatusOr<std::unique_ptr<BlendedDataset>> BlendedDataset::Build(
    const std::vector<Component>& components, const GptDatasetConfig& config) {
  if (absl::Status status = ValidateConfig(config); !status.ok()) {
    return status;
  }
  if (components.empty() ||
      components.size() > static_cast<size_t>(INT16_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("a blend needs 1 to ",
                                                   INT16_MAX, " datasets, got ",
                                                   components.size()));
  }
  double total = 0;
  for (const Component& component : components) {
    if (!(component.weight > 0) || !std::isfinite(component.weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat("blend weight of ", component.documents->prefix(),
                       " must be positive and finite, got ", component.weight));
    }
    total += component.weight;
  }
  std::vector<double> weights;
  for (const Component& component : components) {
    weights.push_back(component.weight / total);
  }
  std::unique_ptr<BlendedDataset> blend(new BlendedDataset());
  blend->seq_length_ = config.seq_length;
  BuildBlendingIndices(weights, config.num_samples, &blend->dataset_index_,
                       &blend->dataset_sample_index_);
  std::vector<int64_t> needed(components.size(), 0);
  for (int16_t d : blend->dataset_index_) ++needed[d];
  for (size_t d = 0; d < components.size(); ++d) {
    GptDatasetConfig component_config = config;
    component_config.num_samples = std::max<int64_t>(needed[d], 1);
    absl::StatusOr<std::unique_ptr<GptDataset>> dataset =
        GptDataset::Build(components[d].documents, component_config);
    if (!dataset.ok()) return dataset.status();
    blend->datasets_.push_back(std::move(*dataset));
  }
  return blend;
}

std::vector<int32_t> BlendedDataset::Sample(int64_t index) const {
  return datasets_[dataset_index_[index]]->Sample(dataset_sample_index_[index]);
}

// ---------------------------------------------------------------- data path

absl::StatusOr<std::unique_ptr<TokenSampleDataset>> BuildPretrainDataset(
    const std::string& data_path, const GptDatasetConfig& config) {
  const std::vector<std::string> words =
      absl::StrSplit(data_path, ' ', absl::SkipWhitespace());
  if (words.empty()) return absl::InvalidArgumentError("empty data path");
  if (words.size() == 1) {
    absl::StatusOr<std::unique_ptr<IndexedDataset>> documents =
        IndexedDataset::Open(words[0]);
    if (!documents.ok()) return documents.status();
    absl::StatusOr<std::unique_ptr<GptDataset>> dataset =
        GptDataset::Build(std::move(*documents), config);
    if (!dataset.ok()) return dataset.status();
    return std::unique_ptr<TokenSampleDataset>(std::move(*dataset));
  }
  if (words.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data path '", data_path,
                     "' must be one prefix or pairs of weight and prefix"));
  }
  std::vector<BlendedDataset::Component> components;
  for (size_t i = 0; i < words.size(); i += 2) {
    BlendedDataset::Component component;
    if (!absl::SimpleAtod(words[i], &component.weight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data path '", data_path, "': '", words[i], "' is not a weight"));
    }
    absl::StatusOr<std::unique_ptr<IndexedDataset>> documents =
        IndexedDataset::Open(words[i + 1]);
    if (!documents.ok()) return documents.status();
    component.documents = std::move(*documents);
    components.push_back(std::move(component));
  }
  absl::StatusOr<std::unique_ptr<BlendedDataset>> blend =
      BlendedDataset::Build(components, config);
  if (!blend.ok()) return blend.status();
  return std::unique_ptr<TokenSampleDataset>(std::move(*blend));
}

}  // namespace glm
