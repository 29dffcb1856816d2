// Grouped GEMMs of the MoE expert layers (CUTLASS's sm90 ptr-array grouped
// GEMM): one launch multiplies every expert's rows by that expert's weight.
//
// Rows [offsets[e], offsets[e+1]) of the row-side operands (x, dy, y, dx)
// belong to group (expert) e. offsets is a device array of experts + 1
// entries, offsets[0] = 0 and offsets[experts] = rows, read only on the
// device: the per-expert row counts never come back to the host, so a call
// never synchronizes. bf16 operands (contiguous, row-major), fp32
// accumulation, outputs given as strided views: fp32, or bf16 where nothing
// accumulates into them (the forward, the written data grad).
//
// Requirements, checked on every call (the process aborts with a message):
// in and out multiples of kGroupedGemmAlign (TMA needs 16-byte aligned row
// pitches and group starts of the bf16 operands), bf16 pointers 16-byte
// aligned, output views of the exact shape that GroupedGemmStores (rows
// stored by TMA), rows and every group below 2^31. Offsets that break their
// contract trap the setup kernel (the error shows at the stream's next
// synchronization).
#ifndef GLM_KERNELS_CUDA_GROUPED_GEMM_CUH_
#define GLM_KERNELS_CUDA_GROUPED_GEMM_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// in and out: multiples of this many bf16 elements (16 bytes).
inline constexpr int64_t kGroupedGemmAlign = 8;
// Whether the GEMMs store into `v`: F32 or BF16 rows a multiple of 16 bytes
// apart, from a 16-byte aligned start (an empty view: nothing to store).
inline bool GroupedGemmStores(const MatrixView& v) {
  return v.empty() || ((v.stride * ElementBytes(v.dtype)) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(v.data) % 16 == 0);
}

// y[r] = x[r] w_e^T: x [rows, in], w [experts * out, in] (group e's weight is
// rows [e*out, (e+1)*out)), y [rows, out] (overwritten; F32 or BF16).
void GroupedGemm(CudaContext& ctx, const __nv_bfloat16* x,
                 const __nv_bfloat16* w, const int32_t* offsets,
                 int64_t experts, int64_t rows, int64_t in, int64_t out,
                 MatrixView y);

// dx[r] += dy[r] w_e: dy [rows, out], dx [rows, in] (accumulated; without
// `accumulate` written, dx not read; a BF16 dx only written).
void GroupedGemmDataGrad(CudaContext& ctx, const __nv_bfloat16* dy,
                         const __nv_bfloat16* w, const int32_t* offsets,
                         int64_t experts, int64_t rows, int64_t in, int64_t out,
                         bool accumulate, MatrixView dx);

// dw_e += dy_e^T x_e: dw [experts * out, in] (F32, accumulated; groups with
// no rows leave their dw unchanged).
void GroupedGemmWeightGrad(CudaContext& ctx, const __nv_bfloat16* dy,
                           const __nv_bfloat16* x, const int32_t* offsets,
                           int64_t experts, int64_t rows, int64_t in,
                           int64_t out, MatrixView dw);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_GROUPED_GEMM_CUH_
