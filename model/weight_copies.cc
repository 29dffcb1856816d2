#include "model/weight_copies.h"

#include "kernels/bf16_copy_layout.h"

namespace glm {

bool IsProductWeight(const ModelParameters& params, const NamedTensor& named) {
  const bool gathered_only = !params.config().tie_word_embeddings &&
                             named.value == &params.embed_tokens.value;
  return params.WholeShape(named.name).size() >= 2 && !gathered_only;
}

std::vector<ConstFloatSpan> ProductWeights(ModelParameters& params) {
  std::vector<ConstFloatSpan> spans;
  for (const NamedTensor& named : params.Named()) {
    const Tensor& value = *named.value;
    if (value.empty() || !IsProductWeight(params, named)) continue;
    spans.push_back({value.data(), value.numel()});
  }
  return spans;
}

int64_t ProductWeightCopyBytes(ModelParameters& params) {
  std::vector<int64_t> sizes;
  for (const ConstFloatSpan& span : ProductWeights(params)) {
    sizes.push_back(span.size);
  }
  return LayOutBf16Copies(sizes).bytes;
}

void RefreshComputeCopies(Backend& backend, ModelParameters& params) {
  backend.RefreshComputeCopies(ProductWeights(params));
}

}  // namespace glm
