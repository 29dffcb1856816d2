// bf16 copies of fp32 views for the library kernels that take bf16 operands
// (cuBLASLt's bf16 products, cuDNN's attention, the CUTLASS grouped GEMM), and
// their fp32 results back. Every pointer is a device pointer.
#ifndef GLM_KERNELS_CUDA_BF16_COPY_CUH_
#define GLM_KERNELS_CUDA_BF16_COPY_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// out [rows, cols] with leading dimension ld >= cols = bf16(x) (round to
// nearest even; x F32, or BF16 copied as it is; the columns past cols are not
// written); when `keep` is given, rows r with keep[r / rows_per_token] == 0 are
// zeroed (attention: tokens without keys). Four elements per access where the
// shapes and addresses allow it.
void PackBf16(CudaContext& ctx, ConstMatrixView x, const int32_t* keep,
              int64_t rows_per_token, __nv_bfloat16* out, int64_t ld);

// out [count, x.cols] with leading dimension ld = bf16(scale[p] x[rows[p]])
// for p < count (scale null: 1; x F32 or BF16): a gather, the scaling and the
// conversion in one pass.
void PackBf16Rows(CudaContext& ctx, ConstMatrixView x, const int32_t* rows,
                  const float* scale, int64_t count, __nv_bfloat16* out,
                  int64_t ld);

// y = x or y += x (accumulate) for x [y.rows, y.cols] bf16 with rows ld
// elements apart; rows that `keep` drops (as PackBf16) get 0 (+= 0).
void UnpackBf16(CudaContext& ctx, const __nv_bfloat16* x, int64_t ld,
                const int32_t* keep, int64_t rows_per_token, bool accumulate,
                MatrixView y);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_BF16_COPY_CUH_
