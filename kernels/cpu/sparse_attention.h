// Causal attention over per-query key lists (MLA with DSA): each query attends
// only to the tokens its top-k list names, so the cost is n * topk, not n^2.
#ifndef GLM_KERNELS_CPU_SPARSE_ATTENTION_H_
#define GLM_KERNELS_CPU_SPARSE_ATTENTION_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

// Semantics in kernels/backend.h, but for the backward adding into dq, dk
// and dv (CpuBackend zeroes them first). The backward does not read `out`: it
// sums p * (dout . v) over the keys instead, in double.
void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                            ConstMatrixView v, const int32_t* keys,
                            int64_t topk, int64_t heads, float scale,
                            MatrixView out, float* lse);
void SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                             ConstMatrixView v, const int32_t* keys,
                             int64_t topk, int64_t heads, float scale,
                             ConstMatrixView out, const float* lse,
                             ConstMatrixView dout, MatrixView dq, MatrixView dk,
                             MatrixView dv);
// Aborts, naming `op` and the query, unless full_queries is 0 or (nq == nk
// and) each query t < full_queries selects every key <= t: the promise a
// caller of Backend::SparseAttentionForward makes with it.
void CheckFullQueries(const char* op, const int32_t* keys, int64_t topk,
                      int64_t full_queries, int64_t nq, int64_t nk);
void SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, const float* lse,
                               MatrixView weights);

// The latent form (Backend::LatentAttentionForward): every head reads key
// token s's one row kv[s] as its key and kv[s]'s first out.cols columns as
// its value. The backward adds into dq and dkv (the keys' and the values'
// gradients in the same rows).
void LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, float* lse);
void LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, const float* lse,
                             ConstMatrixView dout, MatrixView dq,
                             MatrixView dkv);
void LatentAttentionKeyWeights(ConstMatrixView q, ConstMatrixView kv,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, const float* lse,
                               MatrixView weights);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_SPARSE_ATTENTION_H_
