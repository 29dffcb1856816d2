#include "kernels/cuda/linear_cross_entropy.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cassert>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/linear.cuh"

namespace glm::cuda {

void LinearCrossEntropy(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                        const int32_t* targets, float scale, MatrixView logits,
                        double* loss, MatrixView dx, MatrixView dw) {
  assert(logits.rows == x.rows && logits.cols == w.rows);
  Linear(ctx, x, w, logits, false);
  if (ctx.precision() != Precision::kBf16) {
    CrossEntropyLossAndGrad(ctx, logits, targets, scale, loss, logits);
    LinearBackward(ctx, x, w, logits, dx, dw);
    return;
  }
  // bf16 logits take their gradient in place; F32 ones a bf16 copy with rows
  // padded to 16 bytes, as the tensor-core kernels prefer.
  const bool in_place = logits.dtype == ElementType::kBF16;
  const int64_t ld = in_place ? logits.stride : (logits.cols + 7) / 8 * 8;
  auto* dlogits = in_place ? reinterpret_cast<__nv_bfloat16*>(logits.data)
                           : static_cast<__nv_bfloat16*>(ctx.CompositeScratch(
                                 std::max<int64_t>(logits.rows, 1) * ld *
                                 sizeof(__nv_bfloat16)));
  CrossEntropyLossAndGrad(ctx, logits, targets, scale, loss, dlogits, ld);
  LinearBackwardBf16(ctx, x, w, dlogits, ld, dx, dw);
}

}  // namespace glm::cuda
