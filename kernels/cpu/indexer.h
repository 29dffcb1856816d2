// The DSA lightning indexer: per-query top-k key selection, and the KL loss
// that trains the indexer towards the main attention's distribution over the
// selected keys.
#ifndef GLM_KERNELS_CPU_INDEXER_H_
#define GLM_KERNELS_CPU_INDEXER_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

void IndexerTopK(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                 const int32_t* seq_start, int64_t query_offset, int64_t topk,
                 float scale, int32_t* keys);
double IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                     const int32_t* keys, int64_t topk, float scale,
                     ConstMatrixView target, float coeff, MatrixView diq,
                     MatrixView dik, MatrixView dw);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_INDEXER_H_
