// An output head's loss and gradient for a chunk of rows on the GPU
// (Backend::LinearCrossEntropy): the logits by one product, the loss and its
// gradient by one pass over them, then the two gradient products. In the bf16
// mode the gradient is written in bf16, the products' operand type, so its
// fp32 form and the conversion pass over it never exist: over the logits when
// they are bf16 (the activation type, as the product writes them), else in a
// scratch copy; other modes write it over the fp32 logits.
#ifndef GLM_KERNELS_CUDA_LINEAR_CROSS_ENTROPY_H_
#define GLM_KERNELS_CUDA_LINEAR_CROSS_ENTROPY_H_

#include <cstdint>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// logits = x w^T; *loss = the summed cross-entropy of rows with targets >= 0
// (as CrossEntropyForward); dx += dlogits w and dw += dlogits^T x for dlogits
// = scale * (softmax - onehot). logits is F32, or BF16 in the bf16 mode; F32
// logits there take a bf16 [rows, vocab] buffer from ctx.CompositeScratch.
void LinearCrossEntropy(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                        const int32_t* targets, float scale, MatrixView logits,
                        double* loss, MatrixView dx, MatrixView dw);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_LINEAR_CROSS_ENTROPY_H_
