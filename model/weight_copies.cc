#include "model/weight_copies.h"

namespace glm {

std::vector<FlatSpan> ProductWeights(ModelParameters& params) {
  const Tensor* gathered_only = params.config().tie_word_embeddings
                                    ? nullptr
                                    : &params.embed_tokens.value;
  std::vector<FlatSpan> spans;
  for (const NamedTensor& named : params.Named()) {
    const Tensor& value = *named.value;
    if (value.shape().size() < 2 || value.empty() || &value == gathered_only) {
      continue;
    }
    spans.push_back({value.data(), value.numel()});
  }
  return spans;
}

void RefreshComputeCopies(Backend& backend, ModelParameters& params) {
  backend.RefreshComputeCopies(ProductWeights(params));
}

}  // namespace glm
