// Softmax cross-entropy on the GPU, one block per row of logits. Same
// semantics as kernels/cpu/cross_entropy.h; every pointer is a device pointer.
// The log-sum-exp is fp32 with the max subtracted; losses are summed in
// double in a fixed order, so the result is bitwise repeatable.
#ifndef GLM_KERNELS_CUDA_CROSS_ENTROPY_CUH_
#define GLM_KERNELS_CUDA_CROSS_ENTROPY_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Writes to *loss the sum over rows r with targets[r] >= 0 of
// -log softmax(logits[r])[targets[r]]. Scratch: one double per row.
void CrossEntropyForward(CudaContext& ctx, ConstMatrixView logits,
                         const int32_t* targets, double* loss);

// dlogits[r] += scale * (softmax(logits[r]) - onehot(targets[r])) on rows with
// targets[r] >= 0.
void CrossEntropyBackward(CudaContext& ctx, ConstMatrixView logits,
                          const int32_t* targets, float scale,
                          MatrixView dlogits);

// CrossEntropyForward and the gradient of its rows in one pass: *loss as
// CrossEntropyForward's, and dlogits[r] = scale * (softmax(logits[r]) -
// onehot(targets[r])) written, not added (zeros on rows without a target).
// dlogits may be the logits view itself.
void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             MatrixView dlogits);
// The same with dlogits in bf16, row-major with leading dimension ld (each
// value rounded once, as PackBf16 rounds CrossEntropyBackward's). Logits F32
// or BF16; bf16 dlogits may be bf16 logits themselves (ld their stride).
void CrossEntropyLossAndGrad(CudaContext& ctx, ConstMatrixView logits,
                             const int32_t* targets, float scale, double* loss,
                             __nv_bfloat16* dlogits, int64_t ld);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CROSS_ENTROPY_CUH_
