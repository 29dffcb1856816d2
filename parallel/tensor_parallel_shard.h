// Which tensors tensor parallelism splits, and how: Megatron's
// column-parallel projections (q_b_proj and kv_b_proj by heads, the dense
// MLP's gate_proj and up_proj by intermediate rows) are split along dim 0,
// the row-parallel ones (o_proj, the dense MLP's down_proj) along dim 1.
// Everything else (norms, the latent down-projections, the indexer, the
// router, routed and shared experts, embeddings, lm_head, MTP projections) is
// whole on every rank and runs on the rank's own tokens (model/
// token_parallel.h).
#ifndef GLM_PARALLEL_TENSOR_PARALLEL_SHARD_H_
#define GLM_PARALLEL_TENSOR_PARALLEL_SHARD_H_

#include <string>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "model/config.h"

namespace glm {

// 0 or 1: the dimension split over the tensor group; -1: not split. LoRA
// adapters of a split weight W [out, in] = B [out, r] A [r, in] follow it:
// B is split by rows when W is (column-parallel), A by columns when W is
// (row-parallel); the other factor is whole.
int TensorParallelDim(const std::string& name);

// InvalidArgument naming the field unless `tp` divides the attention heads
// and the dense MLP's intermediate size.
absl::Status CheckTensorParallelSize(const ModelConfig& config, int tp);

// Part `index` of `parts` of a 2-D tensor along `dim`.
Tensor TensorParallelPart(const Tensor& whole, int dim, int parts, int index);
// The whole tensor from every rank's part laid end to end in rank order (an
// all-gather's output).
Tensor JoinTensorParallelParts(const float* gathered,
                               const std::vector<int64_t>& whole_shape, int dim,
                               int parts);

}  // namespace glm

#endif  // GLM_PARALLEL_TENSOR_PARALLEL_SHARD_H_
