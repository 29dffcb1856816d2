// The indexer's KL loss for queries that select few of their keys (past 8 x
// top-k keys, where scoring every key, as the dense path does, costs more
// than the selected ones): one block a query reads its selected key rows
// twice, 32 at a time through shared memory, once for the slot scores and
// once for the gradients, with every product on the tensor cores (TF32). The
// key rows' gradients are summed with atomics: not bitwise repeatable.
#ifndef GLM_KERNELS_CUDA_INDEXER_SPARSE_LOSS_CUH_
#define GLM_KERNELS_CUDA_INDEXER_SPARSE_LOSS_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/indexer_slot_loss.cuh"
#include "kernels/tensor.h"

namespace glm::cuda {

// Whether SparseIndexerLoss takes these operands: IndexerScores' (at most 32
// heads, dim a multiple of 8 up to 128, F32 rows 16-byte aligned), top-k up
// to 4096, and dik (when not empty) F32 with 16-byte aligned rows.
bool SparseIndexerLossSupported(ConstMatrixView iq, ConstMatrixView ik,
                                MatrixView dik, int64_t heads, int64_t topk);

// For each of the n queries of p: row_loss[t] = its KL(target || softmax(slot
// scores)), and its coeff-scaled gradients added into diq, dik and dw (empty
// views are not computed). Slot scores sum each head's w * relu(scale * dot)
// over TF32 dots; the gradients are TF32 products of the score gradients (in
// fp32, rounded to TF32) with the key rows and the weighted query rows.
void SparseIndexerLoss(CudaContext& ctx, const KlProblem& p, int64_t n,
                       MatrixView diq, MatrixView dik, MatrixView dw,
                       double* row_loss);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_INDEXER_SPARSE_LOSS_CUH_
