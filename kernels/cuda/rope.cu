#include <cassert>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rope.cuh"

namespace glm::cuda {
namespace {

// Passed by value as a kernel argument: no device buffer needed.
struct InverseFrequencies {
  float value[kMaxRotaryDim / 2];
};

// Float32 inverse frequencies computed on the host with the same expression
// as the CPU op (transformers' formula), so both get the same bits.
InverseFrequencies MakeInverseFrequencies(int64_t rotary_dim, float theta) {
  InverseFrequencies inv;
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    inv.value[i] = 1.f / std::pow(theta, static_cast<float>(2 * i) /
                                             static_cast<float>(rotary_dim));
  }
  return inv;
}

// The angle is a float product, as on the CPU; its sine and cosine are taken
// in double and rounded once, which matches a correctly rounded sinf/cosf.
__device__ __forceinline__ void SinCos(const int32_t* positions,
                                       int64_t rows_per_position, int64_t r,
                                       float inv_freq, float* s, float* c) {
  const float pos = static_cast<float>(positions[r / rows_per_position]);
  const float angle = pos * inv_freq;
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  *s = static_cast<float>(sd);
  *c = static_cast<float>(cd);
}

// One thread per (row, pair i).
__global__ void RopeForwardKernel(ConstMatrixView x, const int32_t* positions,
                                  int64_t rows_per_position,
                                  InverseFrequencies inv, MatrixView y) {
  const int64_t half = x.cols / 2;
  ForEachElement(x.rows, half, [&](int64_t r, int64_t i) {
    float s, c;
    SinCos(positions, rows_per_position, r, inv.value[i], &s, &c);
    const float x0 = At(x, r, 2 * i), x1 = At(x, r, 2 * i + 1);
    Store(y, r, i, x0 * c - x1 * s);
    Store(y, r, half + i, x1 * c + x0 * s);
  });
}

__global__ void RopeBackwardKernel(ConstMatrixView dy, const int32_t* positions,
                                   int64_t rows_per_position,
                                   InverseFrequencies inv, MatrixView dx) {
  const int64_t half = dy.cols / 2;
  ForEachElement(dy.rows, half, [&](int64_t r, int64_t i) {
    float s, c;
    SinCos(positions, rows_per_position, r, inv.value[i], &s, &c);
    const float d0 = Load(dy, r, i), d1 = Load(dy, r, half + i);
    Store(dx, r, 2 * i, d0 * c + d1 * s);
    Store(dx, r, 2 * i + 1, -d0 * s + d1 * c);
  });
}

}  // namespace

void RopeForward(CudaContext& ctx, ConstMatrixView x, const int32_t* positions,
                 int64_t rows_per_position, float theta, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  assert(x.cols % 2 == 0 && x.cols <= kMaxRotaryDim && rows_per_position > 0);
  if (x.rows == 0 || x.cols == 0) return;
  RopeForwardKernel<<<GridStrideBlocks(x.rows * x.cols / 2), kBlockThreads, 0,
                      ctx.stream()>>>(x, positions, rows_per_position,
                                      MakeInverseFrequencies(x.cols, theta), y);
  GLM_CUDA_CHECK_LAUNCH();
}

void RopeBackward(CudaContext& ctx, ConstMatrixView dy,
                  const int32_t* positions, int64_t rows_per_position,
                  float theta, MatrixView dx) {
  assert(dy.rows == dx.rows && dy.cols == dx.cols);
  assert(dy.cols % 2 == 0 && dy.cols <= kMaxRotaryDim && rows_per_position > 0);
  if (dy.rows == 0 || dy.cols == 0) return;
  RopeBackwardKernel<<<GridStrideBlocks(dy.rows * dy.cols / 2), kBlockThreads,
                       0, ctx.stream()>>>(
      dy, positions, rows_per_position, MakeInverseFrequencies(dy.cols, theta),
      dx);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
