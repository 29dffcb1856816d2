// Row gathers and scatters on the GPU: embedding lookup and its backward, MoE
// token dispatch/combine. Same semantics as kernels/cpu/rows.h; every pointer
// is a device pointer.
//
// Scatters that may hit a destination row several times sum its sources in
// ascending source order (the CPU's serial order) through an inverse index
// built with a stable radix sort: bitwise repeatable, no atomics.
#ifndef GLM_KERNELS_CUDA_ROWS_CUH_
#define GLM_KERNELS_CUDA_ROWS_CUH_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// out[i] = table[ids[i]] for i < out.rows; ids in [0, table.rows).
void EmbeddingForward(CudaContext& ctx, ConstMatrixView table,
                      const int32_t* ids, MatrixView out);

// out[p] = scale[p] * x[rows[p]] for p < out.rows (scale null: 1).
void GatherRows(CudaContext& ctx, ConstMatrixView x, const int32_t* rows,
                const float* scale, MatrixView out);

// dtable[ids[i]] += dout[i] for i < dout.rows; ids in [0, dtable.rows).
void EmbeddingBackward(CudaContext& ctx, ConstMatrixView dout,
                       const int32_t* ids, MatrixView dtable);

// out[rows[i]] += scale[i] * src[i] for i < src.rows (scale null: 1); rows in
// [0, out.rows); src F32 or BF16. Scratch: 3 int32 arrays of src.rows plus
// CUB's sort storage.
void ScatterAddRows(CudaContext& ctx, ConstMatrixView src, const int32_t* rows,
                    const float* scale, MatrixView out);

// dsrc[i] = scale[i] * dout[rows[i]] (dsrc empty: skipped); row
// j = dscale_rows[i] (null: i) of the column dscale = src[i] . dout[rows[i]],
// dot in double (dscale empty: skipped); src F32 or BF16. Written, not added.
void ScatterAddRowsBackward(CudaContext& ctx, ConstMatrixView src,
                            const int32_t* rows, const float* scale,
                            ConstMatrixView dout, MatrixView dsrc,
                            MatrixView dscale, const int32_t* dscale_rows);

// Backend::TokenRows: each position at its slot, then each token's positions
// sorted (a thread a token).
void TokenRows(CudaContext& ctx, const int32_t* slots, int64_t count,
               int64_t per_token, int32_t* token_rows);
// Backend::AddRowGroups: ScatterAddRows' by-output-row kernel over fixed runs
// of per_row sources; src F32 or BF16.
void AddRowGroups(CudaContext& ctx, ConstMatrixView src, const int32_t* sources,
                  int64_t per_row, const float* scale, MatrixView out);
// Backend::AddRowGroupsBackward: ScatterAddRowsBackward's kernel with each
// warp's source row from `sources` (per_row consecutive warps share a dout
// row).
void AddRowGroupsBackward(CudaContext& ctx, ConstMatrixView src,
                          const int32_t* sources, int64_t per_row,
                          const float* scale, ConstMatrixView dout,
                          MatrixView dsrc, MatrixView dscale,
                          const int32_t* dscale_rows);
// Backend::GroupByExpert: the stable radix sort of the choices by expert
// (the scatters' sort), then each expert's first position by binary search.
void GroupByExpert(CudaContext& ctx, const int32_t* expert, int64_t count,
                   int64_t per_token, int64_t experts, int32_t* slots,
                   int32_t* tokens, int32_t* offsets);

// Backend::AddExpertLoads.
void AddExpertLoads(CudaContext& ctx, const int32_t* offsets, int64_t experts,
                    int32_t* loads);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ROWS_CUH_
