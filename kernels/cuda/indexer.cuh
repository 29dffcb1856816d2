// The DSA lightning indexer on the GPU: per-query top-k key selection, and the
// KL loss that trains the indexer towards the main attention's distribution
// over the selected keys. Same semantics as kernels/cpu/indexer.cc; every
// pointer is a device pointer.
#ifndef GLM_KERNELS_CUDA_INDEXER_CUH_
#define GLM_KERNELS_CUDA_INDEXER_CUH_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/kept_indexer_scores.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// iq [nq*heads, d], ik [nk, d], w [nq, heads], seq_start [nq]; query t is key
// token g = query_offset + t. score[t, s] = sum_h w[t,h] * relu(scale *
// iq[t,h] . ik[s]) over keys s in [seq_start[t], g], in fp32 with each dot
// summed over d in order and no fused multiply-add: bitwise the CPU's scores,
// so both backends select the same keys. The bf16 mode computes the dots as
// TF32 tensor-core products instead (IndexerScores, where its shapes allow:
// its selections differ from the CPU's only between keys whose scores are
// within about 1e-3 of the scores' scale). Writes keys [nq,
// topk] (contiguous): the min(topk, g - seq_start[t] + 1) best keys, best
// first (ties: lower index first), -1 after them; the bf16 mode lists the
// same selection in key order instead (Backend::IndexerTopK allows it), and a
// query whose token g < topk there takes every key it sees unscored. topk <=
// 4096. Uses ctx.Scratch for a chunk of queries' scores. With `keep` (not
// null) and a selection the loss scores the same way (the bf16 mode's
// tensor-core scores, self-attention, each query selecting at least one in 8
// of the keys, and the kept rows within 1 GiB), scores all of them at once
// into memory of *keep's own (from ctx.allocator()) with their positive-head
// bits (kernels/kept_indexer_scores.h, the queries whose token g >= topk);
// otherwise leaves *keep empty.
void IndexerTopK(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                 ConstMatrixView w, const int32_t* seq_start,
                 int64_t query_offset, int64_t topk, float scale, int32_t* keys,
                 KeptIndexerScores* keep);

// KL(target || softmax(index scores over the selected keys)), averaged over
// the n queries (w's rows) and times coeff, written to *loss. keys [n, topk]
// (contiguous) index ik's rows, -1 = none; target [n, topk] (the attention
// each selected key receives), L1-normalized here. heads <= 32.
// Accumulates (+=) the coeff-scaled gradients into diq [n*heads, d], dik
// [nk, d] and dw [n, heads]; an empty view is not computed. The scores are
// bitwise the CPU's; diq and dw sum over slots in order, as the CPU does; a
// key's dik row sums, in ascending (query, slot) order, each slot's heads
// (no atomics: bitwise repeatable, but for SparseIndexerLoss's dik below).
// In the bf16 mode, when each query selects
// at least one in 8 of the keys, a chunk's scores with every key come from
// IndexerScores (TF32 tensor-core products, the dots never stored) and the
// gradients from bf16 products (ctx.CompositeScratch holds the chunk's
// scores, their positive heads and the dots' bf16 gradients); the queries
// whose scores `kept` (IndexerTopK's, or null) holds for these operands
// are read from it, not scored again. Where each query selects fewer than
// one in 8 of the keys, the bf16 mode with allow_sparse runs
// SparseIndexerLoss (kernels/cuda/indexer_sparse_loss.cuh: TF32 products
// over the selected rows only, dik summed with atomics) where its shapes
// allow. topk <= 4096. Takes IndexerKlLossScratchBytes(...) bytes from
// ctx.Scratch.
void IndexerKlLoss(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                   ConstMatrixView w, const int32_t* keys, int64_t topk,
                   float scale, ConstMatrixView target, float coeff,
                   MatrixView diq, MatrixView dik, MatrixView dw,
                   const KeptIndexerScores* kept, bool allow_sparse,
                   double* loss);

// n per-query losses in double, plus per chunk of queries their score
// gradients per (head, slot) and, when need_dik, each slot's contribution to
// its key's dik row (topk*dim floats per query) and the key -> (query, slot)
// transpose (sort buffers and CUB's temporary storage).
size_t IndexerKlLossScratchBytes(int64_t n, int64_t nk, int64_t dim,
                                 int64_t topk, int64_t heads, bool need_dik);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_INDEXER_CUH_
