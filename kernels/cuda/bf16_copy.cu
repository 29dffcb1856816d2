#include <cassert>
#include <cstdint>

#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

__device__ bool RowKept(const int32_t* keep, int64_t row,
                        int64_t rows_per_token) {
  return keep == nullptr || keep[row / rows_per_token] != 0;
}

// kWidth columns per element of the loop: 4 (16-byte loads of F32 x, 8-byte
// loads of BF16 x; 8-byte stores) or 1. Output row r reads x's row gather[r]
// (null: r) times scale[r] (null: 1); `rows` output rows.
template <int kWidth>
__global__ void PackBf16Kernel(ConstMatrixView x, const int32_t* gather,
                               const float* scale, int64_t rows,
                               const int32_t* keep, int64_t rows_per_token,
                               __nv_bfloat16* out, int64_t ld) {
  ForEachElement(rows, x.cols / kWidth, [&](int64_t r, int64_t group) {
    const bool kept = RowKept(keep, r, rows_per_token);
    const int64_t from = gather == nullptr ? r : gather[r];
    const int64_t c = group * kWidth;
    if constexpr (kWidth == 4) {
      float4 v = kept ? LoadQuad(x, from, c) : make_float4(0.f, 0.f, 0.f, 0.f);
      if (scale != nullptr) {
        const float s = scale[r];
        v = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
      }
      StoreBf16x4(v.x, v.y, v.z, v.w, out + r * ld + c);
    } else {
      const float v = kept ? Load(x, from, c) : 0.f;
      out[r * ld + c] = __float2bfloat16(scale != nullptr ? scale[r] * v : v);
    }
  });
}

__global__ void UnpackBf16Kernel(const __nv_bfloat16* x, int64_t ld,
                                 const int32_t* keep, int64_t rows_per_token,
                                 bool accumulate, MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    const float value = RowKept(keep, r, rows_per_token)
                            ? __bfloat162float(x[r * ld + c])
                            : 0.f;
    float& out = At(y, r, c);
    out = accumulate ? out + value : value;
  });
}

// Both packers: x's rows (gather null) or x[gather[r]] (times scale[r]) for
// r < rows.
void LaunchPackBf16(CudaContext& ctx, ConstMatrixView x, const int32_t* gather,
                    const float* scale, int64_t rows, const int32_t* keep,
                    int64_t rows_per_token, __nv_bfloat16* out, int64_t ld) {
  assert(ld >= x.cols);
  if (rows == 0 || x.cols == 0) return;
  const bool wide =
      x.cols % 4 == 0 && (x.rows == 1 || x.stride % 4 == 0) && ld % 4 == 0 &&
      AlignedTo(x.data, 4 * ElementBytes(x.dtype)) && AlignedTo(out, 8);
  if (wide) {
    PackBf16Kernel<4><<<GridStrideBlocks(rows * x.cols / 4), kBlockThreads, 0,
                        ctx.stream()>>>(x, gather, scale, rows, keep,
                                        rows_per_token, out, ld);
  } else {
    PackBf16Kernel<1>
        <<<GridStrideBlocks(rows * x.cols), kBlockThreads, 0, ctx.stream()>>>(
            x, gather, scale, rows, keep, rows_per_token, out, ld);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void PackBf16(CudaContext& ctx, ConstMatrixView x, const int32_t* keep,
              int64_t rows_per_token, __nv_bfloat16* out, int64_t ld) {
  LaunchPackBf16(ctx, x, nullptr, nullptr, x.rows, keep, rows_per_token, out,
                 ld);
}

void PackBf16Rows(CudaContext& ctx, ConstMatrixView x, const int32_t* rows,
                  const float* scale, int64_t count, __nv_bfloat16* out,
                  int64_t ld) {
  LaunchPackBf16(ctx, x, rows, scale, count, nullptr, 1, out, ld);
}

void UnpackBf16(CudaContext& ctx, const __nv_bfloat16* x, int64_t ld,
                const int32_t* keep, int64_t rows_per_token, bool accumulate,
                MatrixView y) {
  assert(ld >= y.cols);
  UnpackBf16Kernel<<<GridStrideBlocks(y.rows * y.cols), kBlockThreads, 0,
                     ctx.stream()>>>(x, ld, keep, rows_per_token, accumulate,
                                     y);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
