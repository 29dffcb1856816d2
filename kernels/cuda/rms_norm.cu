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

// dx = base + inv * (g - xhat * mean(g . xhat)), g = dy * w, xhat = x *
// inv; base is residual where given, else dx itself (dx +=).
__global__ void RmsNormBackwardKernel(ConstMatrixView x, const float* w,
                                      const float* rstd, ConstMatrixView dy,
                                      ConstMatrixView residual, MatrixView dx) {
  const int64_t r = blockIdx.x;
  const float inv = rstd[r];
  double dot = 0;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    dot += double{At(dy, r, c)} * w[c] * At(x, r, c) * inv;
  }
  const float mean_dot = static_cast<float>(BlockSum(dot) / x.cols);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
    const float base =
        residual.data == nullptr ? At(dx, r, c) : At(residual, r, c);
    At(dx, r, c) =
        base + inv * (At(dy, r, c) * w[c] - At(x, r, c) * inv * mean_dot);
  }
}

// ---- rows held in registers ----
// Rows of up to kMaxQuads * 4 * kRowThreadsMax floats whose views allow
// 16-byte loads: each thread keeps its float4s of the row in registers, so x
// (and dy) is read from memory once, four floats a load; the same arithmetic
// per element as the kernels above.
constexpr int kMaxQuads = 2;
constexpr int kRowThreadsMax = 512;

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

// Rows [blockIdx.x * rows_per_block, +rows_per_block) a block, one after
// another: each row's x and dy are loaded while the row before is reduced,
// and its residual (or dx) before its own reduction, so that a block keeps
// its next loads in flight. Where dw_partial is given, each thread also sums
// its columns' dy * x * rstd over the block's rows in order (double, as
// WeightGradTerm) and writes the sums to row blockIdx.x of dw_partial
// [blocks, cols]: the weight gradient from the same reads of x and dy, its
// blocks summed by AddColumnSums.
__global__ void RmsNormBackwardQuadKernel(ConstMatrixView x, const float* w,
                                          const float* rstd, ConstMatrixView dy,
                                          ConstMatrixView residual,
                                          MatrixView dx, int64_t rows_per_block,
                                          double* dw_partial) {
  const int64_t r0 = blockIdx.x * rows_per_block;
  const int64_t r_end = min(x.rows, r0 + rows_per_block);
  const int quads = static_cast<int>(x.cols / 4);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const bool want_dx = dx.data != nullptr;
  const bool add_residual = residual.data != nullptr;
  double dw_sum[kMaxQuads][4] = {};
  float4 next_x[kMaxQuads] = {}, next_dy[kMaxQuads] = {};
  auto load_row = [&](int64_t r) {
    ForHeldQuads(quads, [&](int k, int q) {
      next_x[k] = QuadAt(x, r, 4 * q);
      next_dy[k] = QuadAt(dy, r, 4 * q);
    });
  };
  load_row(r0);
  for (int64_t r = r0; r < r_end; ++r) {
    float4 held_x[kMaxQuads], held_dy[kMaxQuads], base[kMaxQuads];
#pragma unroll
    for (int k = 0; k < kMaxQuads; ++k) {
      held_x[k] = next_x[k];
      held_dy[k] = next_dy[k];
    }
    if (want_dx) {
      ForHeldQuads(quads, [&](int k, int q) {
        base[k] =
            add_residual ? QuadAt(residual, r, 4 * q) : QuadAt(dx, r, 4 * q);
      });
    }
    if (r + 1 < r_end) load_row(r + 1);
    const float inv = rstd[r];
    double dot = 0;
    ForHeldQuads(quads, [&](int k, int q) {
      dot += Dot(held_dy[k], w4[q], held_x[k], inv);
    });
    if (dw_partial != nullptr) {
      ForHeldQuads(quads, [&](int k, int) {
        const float4 a = held_x[k], d = held_dy[k];
        dw_sum[k][0] += double{d.x} * a.x * inv;
        dw_sum[k][1] += double{d.y} * a.y * inv;
        dw_sum[k][2] += double{d.z} * a.z * inv;
        dw_sum[k][3] += double{d.w} * a.w * inv;
      });
    }
    if (!want_dx) continue;  // the same for the whole block
    const float mean_dot = static_cast<float>(BlockSum(dot) / x.cols);
    ForHeldQuads(quads, [&](int k, int q) {
      const float4 a = held_x[k], d = held_dy[k], g = w4[q];
      float4 out = base[k];
      out.x += NormGrad(inv, d.x, g.x, a.x, mean_dot);
      out.y += NormGrad(inv, d.y, g.y, a.y, mean_dot);
      out.z += NormGrad(inv, d.z, g.z, a.z, mean_dot);
      out.w += NormGrad(inv, d.w, g.w, a.w, mean_dot);
      QuadAt(dx, r, 4 * q) = out;
    });
  }
  if (dw_partial == nullptr) return;
  ForHeldQuads(quads, [&](int k, int q) {
    double* out = dw_partial + blockIdx.x * x.cols + 4 * q;
    for (int i = 0; i < 4; ++i) out[i] = dw_sum[k][i];
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

// Rows a block of the register-held backward sums into its weight-gradient
// partial: enough rows that the partials stay small against x and dy (a
// double a column for every 8 rows: a quarter of dy's bytes), few enough
// that the blocks fill the GPU (4,096 rows: 512 blocks).
constexpr int64_t kRowsPerPartial = 8;

void RmsNormBackward(CudaContext& ctx, ConstMatrixView x, const float* w,
                     const float* rstd, ConstMatrixView dy,
                     ConstMatrixView residual, MatrixView dx, float* dw) {
  assert(dy.rows == x.rows && dy.cols == x.cols);
  assert(dx.empty() || (dx.rows == x.rows && dx.cols == x.cols));
  assert(residual.empty() ||
         (!dx.empty() && residual.rows == x.rows && residual.cols == x.cols));
  if (x.rows == 0 || x.cols == 0) return;
  if (RowsFitRegisters(x.cols) && QuadAligned(x, dy, dx, residual) &&
      AlignedTo(w, 16)) {
    // One row a block where only dx is wanted; blocks of rows summing
    // weight-gradient partials where dw is.
    const int64_t rows_per_block = dw != nullptr ? kRowsPerPartial : 1;
    const int64_t blocks = (x.rows + rows_per_block - 1) / rows_per_block;
    double* partial = dw != nullptr ? static_cast<double*>(ctx.Scratch(
                                          sizeof(double) * blocks * x.cols))
                                    : nullptr;
    RmsNormBackwardQuadKernel<<<blocks, QuadRowThreads(x.cols), 0,
                                ctx.stream()>>>(x, w, rstd, dy, residual, dx,
                                                rows_per_block, partial);
    GLM_CUDA_CHECK_LAUNCH();
    if (dw != nullptr)
      AddColumnSums<1>(partial, blocks, x.cols, {{dw}}, ctx.stream());
    return;
  }
  if (!dx.empty()) {
    RmsNormBackwardKernel<<<x.rows, RowBlockThreads(x.cols), 0, ctx.stream()>>>(
        x, w, rstd, dy, residual, dx);
    GLM_CUDA_CHECK_LAUNCH();
  }
  if (dw != nullptr) {
    void* scratch = ctx.Scratch(ColumnSumsBytes<1>(x.rows, x.cols));
    ColumnSums<1>(WeightGradTerm{x, dy, rstd}, x.rows, x.cols,
                  ColumnOutputs<1>{{dw}}, scratch, ctx.stream());
  }
}

}  // namespace glm::cuda
