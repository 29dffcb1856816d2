#include <cassert>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace glm::cuda {
namespace {

// One block per row. The sum of squares is in double and the reciprocal
// square root in IEEE float, as on the CPU. y may be BF16: the same value,
// rounded.
__global__ void RmsNormForwardKernel(ConstMatrixView x, const float* w,
                                     float eps, MatrixView y, float* rstd) {
  const int64_t r = blockIdx.x;
  double sum_sq = 0;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    const float v = At(x, r, c);
    sum_sq += double{v} * v;
  }
  const float inv =
      1.f / sqrtf(static_cast<float>(BlockSum(sum_sq) / x.cols) + eps);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    Store(y, r, c, w[c] * (At(x, r, c) * inv));
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[r] = inv;
}

// dx += inv * (g - xhat * mean(g . xhat)), g = dy * w, xhat = x * inv.
__global__ void RmsNormBackwardKernel(ConstMatrixView x, const float* w,
                                      const float* rstd, ConstMatrixView dy,
                                      MatrixView dx) {
  const int64_t r = blockIdx.x;
  const float inv = rstd[r];
  double dot = 0;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    dot += double{At(dy, r, c)} * w[c] * At(x, r, c) * inv;
  }
  const float mean_dot = static_cast<float>(BlockSum(dot) / x.cols);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    At(dx, r, c) += inv * (At(dy, r, c) * w[c] - At(x, r, c) * inv * mean_dot);
  }
}

// ---- rows held in registers ----
// Rows of up to kMaxQuads * 4 * kRowThreadsMax floats whose views allow
// 16-byte loads: each thread keeps its float4s of the row in registers, so x
// (and dy) is read from memory once, four floats a load; the same arithmetic
// per element as the kernels above.
constexpr int kMaxQuads = 4;
constexpr int kRowThreadsMax = 256;

bool RowsFitRegisters(int64_t cols) {
  return cols % 4 == 0 && cols <= 4 * kMaxQuads * kRowThreadsMax;
}

// Threads for a row of `cols` floats: a multiple of 32 with at most kMaxQuads
// float4s each.
int QuadRowThreads(int64_t cols) {
  const int64_t quads = cols / 4;
  const int64_t threads = (quads + kMaxQuads - 1) / kMaxQuads;
  return static_cast<int>((threads + 31) / 32 * 32);
}

// body(k, q) for the quads q = threadIdx.x + k * blockDim.x (k < kMaxQuads)
// of a row of `quads`: the thread's k-th float4 of the row, which it holds.
template <typename Body>
__device__ __forceinline__ void ForHeldQuads(int quads, const Body& body) {
#pragma unroll
  for (int k = 0; k < kMaxQuads; ++k) {
    const int q = threadIdx.x + k * blockDim.x;
    if (q < quads) body(k, q);
  }
}

__device__ __forceinline__ double SumSquares(float4 v) {
  return double{v.x} * v.x + double{v.y} * v.y + double{v.z} * v.z +
         double{v.w} * v.w;
}

__global__ void RmsNormForwardQuadKernel(ConstMatrixView x, const float* w,
                                         float eps, MatrixView y, float* rstd) {
  const int64_t r = blockIdx.x;
  const int quads = static_cast<int>(x.cols / 4);
  float4 held[kMaxQuads];
  double sum_sq = 0;
  ForHeldQuads(quads, [&](int k, int q) {
    held[k] = QuadAt(x, r, 4 * q);
    sum_sq += SumSquares(held[k]);
  });
  const float inv =
      1.f / sqrtf(static_cast<float>(BlockSum(sum_sq) / x.cols) + eps);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  ForHeldQuads(quads, [&](int k, int q) {
    const float4 a = held[k], g = w4[q];
    StoreQuad(y, r, 4 * q,
              make_float4(g.x * (a.x * inv), g.y * (a.y * inv),
                          g.z * (a.z * inv), g.w * (a.w * inv)));
  });
  if (rstd != nullptr && threadIdx.x == 0) rstd[r] = inv;
}

__device__ __forceinline__ double Dot(float4 dy, float4 w, float4 x,
                                      float inv) {
  return double{dy.x} * w.x * x.x * inv + double{dy.y} * w.y * x.y * inv +
         double{dy.z} * w.z * x.z * inv + double{dy.w} * w.w * x.w * inv;
}

__device__ __forceinline__ float NormGrad(float inv, float dy, float w, float x,
                                          float mean_dot) {
  return inv * (dy * w - x * inv * mean_dot);
}

__global__ void RmsNormBackwardQuadKernel(ConstMatrixView x, const float* w,
                                          const float* rstd, ConstMatrixView dy,
                                          MatrixView dx) {
  const int64_t r = blockIdx.x;
  const float inv = rstd[r];
  const int quads = static_cast<int>(x.cols / 4);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 held_x[kMaxQuads], held_dy[kMaxQuads];
  double dot = 0;
  ForHeldQuads(quads, [&](int k, int q) {
    held_x[k] = QuadAt(x, r, 4 * q);
    held_dy[k] = QuadAt(dy, r, 4 * q);
    dot += Dot(held_dy[k], w4[q], held_x[k], inv);
  });
  const float mean_dot = static_cast<float>(BlockSum(dot) / x.cols);
  ForHeldQuads(quads, [&](int k, int q) {
    const float4 a = held_x[k], d = held_dy[k], g = w4[q];
    float4 out = QuadAt(dx, r, 4 * q);
    out.x += NormGrad(inv, d.x, g.x, a.x, mean_dot);
    out.y += NormGrad(inv, d.y, g.y, a.y, mean_dot);
    out.z += NormGrad(inv, d.z, g.z, a.z, mean_dot);
    out.w += NormGrad(inv, d.w, g.w, a.w, mean_dot);
    QuadAt(dx, r, 4 * q) = out;
  });
}

// dw[c] = sum over rows of dy * x * rstd.
struct WeightGradTerm {
  ConstMatrixView x;
  ConstMatrixView dy;
  const float* rstd;

  __device__ void operator()(int64_t r, int64_t c, double (&acc)[1]) const {
    acc[0] += double{At(dy, r, c)} * At(x, r, c) * rstd[r];
  }
};

}  // namespace

void RmsNormForward(CudaContext& ctx, ConstMatrixView x, const float* w,
                    float eps, MatrixView y, float* rstd) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  if (RowsFitRegisters(x.cols) && QuadAligned(x, y) && AlignedTo(w, 16)) {
    RmsNormForwardQuadKernel<<<x.rows, QuadRowThreads(x.cols), 0,
                               ctx.stream()>>>(x, w, eps, y, rstd);
  } else {
    RmsNormForwardKernel<<<x.rows, RowBlockThreads(x.cols), 0, ctx.stream()>>>(
        x, w, eps, y, rstd);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

void RmsNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                     const float* rstd, ConstMatrixView dy, MatrixView dx,
                     float* dw) {
  assert(dy.rows == x.rows && dy.cols == x.cols);
  assert(dx.empty() || (dx.rows == x.rows && dx.cols == x.cols));
  if (x.rows == 0 || x.cols == 0) return;
  if (!dx.empty()) {
    if (RowsFitRegisters(x.cols) && QuadAligned(x, dy, dx) &&
        AlignedTo(w, 16)) {
      RmsNormBackwardQuadKernel<<<x.rows, QuadRowThreads(x.cols), 0,
                                  ctx.stream()>>>(x, w, rstd, dy, dx);
    } else {
      RmsNormBackwardKernel<<<x.rows, RowBlockThreads(x.cols), 0,
                              ctx.stream()>>>(x, w, rstd, dy, dx);
    }
    GLM_CUDA_CHECK_LAUNCH();
  }
  if (dw != nullptr) {
    void* scratch = ctx.Scratch(ColumnSumsBytes<1>(x.rows, x.cols));
    ColumnSums<1>(WeightGradTerm{x, dy, rstd}, x.rows, x.cols,
                  ColumnOutputs<1>{{dw}}, scratch, ctx.stream());
  }
}

}  // namespace glm::cuda
