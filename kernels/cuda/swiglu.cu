#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace glm::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}

__device__ __forceinline__ float SwiGlu(float g, float u) {
  return g * Sigmoid(g) * u;
}

// Four columns a step (QuadAligned views): the element-wise kernels are
// bound by loads in flight. Every view may be BF16 (read widened, written
// rounded to nearest even).
__global__ void SwiGluForwardQuadKernel(ConstMatrixView gate,
                                        ConstMatrixView up, MatrixView out) {
  ForEachQuad(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float4 g = LoadQuad(gate, r, c), u = LoadQuad(up, r, c);
    StoreQuad(out, r, c,
              make_float4(SwiGlu(g.x, u.x), SwiGlu(g.y, u.y), SwiGlu(g.z, u.z),
                          SwiGlu(g.w, u.w)));
  });
}

// One element's gradients of the gate and the up projection.
struct SwiGluGrads {
  float dgate, dup;
};
__device__ __forceinline__ SwiGluGrads GradsOf(float g, float u, float d) {
  const float s = Sigmoid(g);
  // d silu / dg = s * (1 + g * (1 - s)).
  return {d * u * s * (1.f + g * (1.f - s)), d * (g * s)};
}

__global__ void SwiGluBackwardQuadKernel(ConstMatrixView gate,
                                         ConstMatrixView up,
                                         ConstMatrixView dout, MatrixView dgate,
                                         MatrixView dup) {
  ForEachQuad(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float4 g = LoadQuad(gate, r, c), u = LoadQuad(up, r, c),
                 d = LoadQuad(dout, r, c);
    const SwiGluGrads e[4] = {GradsOf(g.x, u.x, d.x), GradsOf(g.y, u.y, d.y),
                              GradsOf(g.z, u.z, d.z), GradsOf(g.w, u.w, d.w)};
    if (dgate.data != nullptr) {
      StoreQuad(dgate, r, c,
                make_float4(e[0].dgate, e[1].dgate, e[2].dgate, e[3].dgate));
    }
    if (dup.data != nullptr) {
      StoreQuad(dup, r, c, make_float4(e[0].dup, e[1].dup, e[2].dup, e[3].dup));
    }
  });
}

// One element a step, for views QuadAligned refuses. Empty gradient views
// (null data) are skipped.
__global__ void SwiGluForwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                    MatrixView out) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    Store(out, r, c, SwiGlu(Load(gate, r, c), Load(up, r, c)));
  });
}

__global__ void SwiGluBackwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                     ConstMatrixView dout, MatrixView dgate,
                                     MatrixView dup) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const SwiGluGrads e =
        GradsOf(Load(gate, r, c), Load(up, r, c), Load(dout, r, c));
    if (dgate.data != nullptr) Store(dgate, r, c, e.dgate);
    if (dup.data != nullptr) Store(dup, r, c, e.dup);
  });
}

}  // namespace

void SwiGluForward(CudaContext& ctx, ConstMatrixView gate, ConstMatrixView up,
                   MatrixView out) {
  assert(gate.rows == up.rows && gate.cols == up.cols);
  assert(out.rows == gate.rows && out.cols == gate.cols);
  if (gate.rows == 0 || gate.cols == 0) return;
  if (QuadAligned(gate, up, out)) {
    SwiGluForwardQuadKernel<<<GridStrideBlocks(gate.rows * gate.cols / 4),
                              kBlockThreads, 0, ctx.stream()>>>(gate, up, out);
  } else {
    SwiGluForwardKernel<<<GridStrideBlocks(gate.rows * gate.cols),
                          kBlockThreads, 0, ctx.stream()>>>(gate, up, out);
  }
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
  if (QuadAligned(gate, up, dout, dgate, dup)) {
    SwiGluBackwardQuadKernel<<<GridStrideBlocks(gate.rows * gate.cols / 4),
                               kBlockThreads, 0, ctx.stream()>>>(gate, up, dout,
                                                                 dgate, dup);
  } else {
    SwiGluBackwardKernel<<<GridStrideBlocks(gate.rows * gate.cols),
                           kBlockThreads, 0, ctx.stream()>>>(gate, up, dout,
                                                             dgate, dup);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
