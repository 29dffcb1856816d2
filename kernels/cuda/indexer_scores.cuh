// The lightning indexer's scores on the tensor cores, without writing its
// dots: score[t, s] = sum_h w[t,h] * relu(scale * iq[t,h] . ik[s]), each dot
// a TF32 product (operands rounded to TF32, sums in fp32, as the TF32 GEMMs
// the bf16 mode used before), the heads summed in registers. The
// [queries x heads, keys] dots (a GB per 4k layer) are never stored; the KL
// loss's gradient takes, instead of them, each (query, key)'s heads whose
// dot is positive, a bit each.
#ifndef GLM_KERNELS_CUDA_INDEXER_SCORES_CUH_
#define GLM_KERNELS_CUDA_INDEXER_SCORES_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Whether IndexerScores takes these operands: at most 32 heads, dim a
// multiple of 8 up to 128, iq and ik F32 with 16-byte aligned rows.
bool IndexerScoresSupported(ConstMatrixView iq, ConstMatrixView ik,
                            int64_t heads);

// For queries t0 <= t < t0 + count (w's rows, w [n, heads]; iq's rows t *
// heads + h) and keys s < key_end of ik: scores[(t - t0) * ld + s] and, when
// positive is not null, positive[(t - t0) * ld + s] with bit h set where
// scale * iq[t,h] . ik[s] > 0. With causal_offset >= 0 query t sees keys s
// <= causal_offset + t only: the entries past them are left unwritten.
// Sums run in an order fixed by the shapes: deterministic.
void IndexerScores(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                   ConstMatrixView w, int64_t t0, int64_t count,
                   int64_t key_end, int64_t causal_offset, float scale,
                   float* scores, uint32_t* positive, int64_t ld);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_INDEXER_SCORES_CUH_
