#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace glm::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}

__global__ void SwiGluForwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                    MatrixView out) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float g = At(gate, r, c);
    At(out, r, c) = g * Sigmoid(g) * At(up, r, c);
  });
}

// Empty gradient views (null data) are skipped.
__global__ void SwiGluBackwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                     ConstMatrixView dout, MatrixView dgate,
                                     MatrixView dup) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float g = At(gate, r, c);
    const float d = At(dout, r, c);
    const float s = Sigmoid(g);
    // d silu / dg = s * (1 + g * (1 - s)).
    if (dgate.data != nullptr) {
      At(dgate, r, c) += d * At(up, r, c) * s * (1.f + g * (1.f - s));
    }
    if (dup.data != nullptr) At(dup, r, c) += d * (g * s);
  });
}

}  // namespace

void SwiGluForward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                   MatrixView out) {
  assert(gate.rows == up.rows && gate.cols == up.cols);
  assert(out.rows == gate.rows && out.cols == gate.cols);
  if (gate.rows == 0 || gate.cols == 0) return;
  SwiGluForwardKernel<<<GridStrideBlocks(gate.rows * gate.cols), kBlockThreads,
                        0, ctx.stream()>>>(gate, up, out);
  GLM_CUDA_CHECK_LAUNCH();
}

void SwiGluBackward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                    ConstMatrixView dout, MatrixView dgate, MatrixView dup) {
  assert(gate.rows == up.rows && gate.cols == up.cols);
  assert(dout.rows == gate.rows && dout.cols == gate.cols);
  assert(dgate.empty() || (dgate.rows == gate.rows && dgate.cols == gate.cols));
  assert(dup.empty() || (dup.rows == gate.rows && dup.cols == gate.cols));
  if (gate.rows == 0 || gate.cols == 0 || (dgate.empty() && dup.empty())) {
    return;
  }
  SwiGluBackwardKernel<<<GridStrideBlocks(gate.rows * gate.cols), kBlockThreads,
                         0, ctx.stream()>>>(gate, up, dout, dgate, dup);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
