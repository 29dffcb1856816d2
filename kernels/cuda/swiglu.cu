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
// bound by loads in flight.
__global__ void SwiGluForwardQuadKernel(ConstMatrixView gate,
                                        ConstMatrixView up, MatrixView out) {
  ForEachQuad(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float4 g = QuadAt(gate, r, c), u = QuadAt(up, r, c);
    QuadAt(out, r, c) = make_float4(SwiGlu(g.x, u.x), SwiGlu(g.y, u.y),
                                    SwiGlu(g.z, u.z), SwiGlu(g.w, u.w));
  });
}

// The gradients of one element into *dg and *du (either may be skipped).
__device__ __forceinline__ void AddSwiGluGrads(float g, float u, float d,
                                               float* dg, float* du) {
  const float s = Sigmoid(g);
  // d silu / dg = s * (1 + g * (1 - s)).
  if (dg != nullptr) *dg += d * u * s * (1.f + g * (1.f - s));
  if (du != nullptr) *du += d * (g * s);
}

__global__ void SwiGluBackwardQuadKernel(ConstMatrixView gate,
                                         ConstMatrixView up,
                                         ConstMatrixView dout, MatrixView dgate,
                                         MatrixView dup) {
  const bool want_dgate = dgate.data != nullptr, want_dup = dup.data != nullptr;
  ForEachQuad(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    const float4 g = QuadAt(gate, r, c), u = QuadAt(up, r, c),
                 d = QuadAt(dout, r, c);
    float4 dg = want_dgate ? QuadAt(dgate, r, c) : float4{};
    float4 du = want_dup ? QuadAt(dup, r, c) : float4{};
    float* dgp = want_dgate ? &dg.x : nullptr;
    float* dup_p = want_dup ? &du.x : nullptr;
    AddSwiGluGrads(g.x, u.x, d.x, dgp, dup_p);
    AddSwiGluGrads(g.y, u.y, d.y, dgp ? &dg.y : nullptr,
                   dup_p ? &du.y : nullptr);
    AddSwiGluGrads(g.z, u.z, d.z, dgp ? &dg.z : nullptr,
                   dup_p ? &du.z : nullptr);
    AddSwiGluGrads(g.w, u.w, d.w, dgp ? &dg.w : nullptr,
                   dup_p ? &du.w : nullptr);
    if (want_dgate) QuadAt(dgate, r, c) = dg;
    if (want_dup) QuadAt(dup, r, c) = du;
  });
}

// One element a step, for views QuadAligned refuses. Empty gradient views
// (null data) are skipped.
__global__ void SwiGluForwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                    MatrixView out) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    At(out, r, c) = SwiGlu(At(gate, r, c), At(up, r, c));
  });
}

__global__ void SwiGluBackwardKernel(ConstMatrixView gate, ConstMatrixView up,
                                     ConstMatrixView dout, MatrixView dgate,
                                     MatrixView dup) {
  ForEachElement(gate.rows, gate.cols, [&](int64_t r, int64_t c) {
    AddSwiGluGrads(At(gate, r, c), At(up, r, c), At(dout, r, c),
                   dgate.data != nullptr ? &At(dgate, r, c) : nullptr,
                   dup.data != nullptr ? &At(dup, r, c) : nullptr);
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
