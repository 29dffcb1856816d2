#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace glm::cuda {
namespace {

// x and y F32 or BF16 (a conversion when they differ).
__global__ void CopyKernel(ConstMatrixView x, MatrixView y) {
  ForEachElement(x.rows, x.cols,
                 [&](int64_t r, int64_t c) { Store(y, r, c, Load(x, r, c)); });
}

// Four columns a step (QuadAligned views): the copies are bound by accesses
// in flight, and most of the model's are whole head rows.
__global__ void CopyQuadKernel(ConstMatrixView x, MatrixView y) {
  ForEachQuad(x.rows, x.cols, [&](int64_t r, int64_t c) {
    StoreQuad(y, r, c, LoadQuad(x, r, c));
  });
}

__global__ void AxpyQuadKernel(float alpha, ConstMatrixView x, MatrixView y) {
  ForEachQuad(x.rows, x.cols, [&](int64_t r, int64_t c) {
    const float4 a = QuadAt(x, r, c);
    float4& b = QuadAt(y, r, c);
    b = make_float4(b.x + alpha * a.x, b.y + alpha * a.y, b.z + alpha * a.z,
                    b.w + alpha * a.w);
  });
}

__global__ void AxpyKernel(float alpha, ConstMatrixView x, MatrixView y) {
  ForEachElement(x.rows, x.cols, [&](int64_t r, int64_t c) {
    At(y, r, c) += alpha * At(x, r, c);
  });
}

__global__ void RepeatRowsKernel(ConstMatrixView x, int64_t repeats,
                                 MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    Store(y, r, c, At(x, r / repeats, c));
  });
}

__global__ void SumRowGroupsKernel(ConstMatrixView x, int64_t repeats,
                                   MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    float sum = At(y, r, c);
    for (int64_t i = 0; i < repeats; ++i) {
      sum = __fadd_rn(sum, Load(x, r * repeats + i, c));
    }
    At(y, r, c) = sum;
  });
}

__global__ void AddQuotientKernel(const double* value, double divisor,
                                  double* sum) {
  *sum += *value / divisor;
}

}  // namespace

void Copy(CudaContext& ctx, ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  if (QuadAligned(x, y)) {
    CopyQuadKernel<<<GridStrideBlocks(x.rows * x.cols / 4), kBlockThreads, 0,
                     ctx.stream()>>>(x, y);
  } else {
    CopyKernel<<<GridStrideBlocks(x.rows * x.cols), kBlockThreads, 0,
                 ctx.stream()>>>(x, y);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

void Zero(CudaContext& ctx, MatrixView y) {
  if (y.empty() || y.rows == 0 || y.cols == 0) return;
  // A single row's stride is free; memset wants a pitch of its width or more.
  const int64_t pitch = y.rows == 1 ? y.cols : y.stride;
  const int64_t bytes = ElementBytes(y.dtype);
  GLM_CUDA_CHECK(cudaMemset2DAsync(y.data, pitch * bytes, 0, y.cols * bytes,
                                   y.rows, ctx.stream()));
}

void Axpy(CudaContext& ctx, float alpha, ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  if (QuadAligned(x, y)) {
    AxpyQuadKernel<<<GridStrideBlocks(x.rows * x.cols / 4), kBlockThreads, 0,
                     ctx.stream()>>>(alpha, x, y);
  } else {
    AxpyKernel<<<GridStrideBlocks(x.rows * x.cols), kBlockThreads, 0,
                 ctx.stream()>>>(alpha, x, y);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

void RepeatRows(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                MatrixView y) {
  assert(x.rows * repeats == y.rows && x.cols == y.cols);
  if (y.rows == 0 || y.cols == 0) return;
  RepeatRowsKernel<<<GridStrideBlocks(y.rows * y.cols), kBlockThreads, 0,
                     ctx.stream()>>>(x, repeats, y);
  GLM_CUDA_CHECK_LAUNCH();
}

void SumRowGroups(CudaContext& ctx, ConstMatrixView x, int64_t repeats,
                  MatrixView y) {
  assert(y.rows * repeats == x.rows && x.cols == y.cols);
  if (y.rows == 0 || y.cols == 0) return;
  SumRowGroupsKernel<<<GridStrideBlocks(y.rows * y.cols), kBlockThreads, 0,
                       ctx.stream()>>>(x, repeats, y);
  GLM_CUDA_CHECK_LAUNCH();
}

std::vector<MatrixView> AsF32(CudaContext& ctx,
                              std::initializer_list<ConstMatrixView> inputs,
                              std::initializer_list<MatrixView> outputs) {
  auto copy_bytes = [](ConstMatrixView v) {
    return v.dtype == ElementType::kBF16
               ? ScratchAlignUp(v.rows * v.cols * sizeof(float))
               : size_t{0};
  };
  size_t bytes = 0;
  for (ConstMatrixView v : inputs) bytes += copy_bytes(v);
  for (ConstMatrixView v : outputs) bytes += copy_bytes(v);
  char* next = static_cast<char*>(ctx.CompositeScratch(bytes));
  std::vector<MatrixView> views;
  auto stand_in = [&](ConstMatrixView v, bool widen) {
    if (v.dtype != ElementType::kBF16) {
      views.push_back({const_cast<float*>(v.data), v.rows, v.cols, v.stride});
      return;
    }
    const MatrixView copy{reinterpret_cast<float*>(next), v.rows, v.cols,
                          v.cols};
    next += copy_bytes(v);
    if (widen) Copy(ctx, v, copy);
    views.push_back(copy);
  };
  for (ConstMatrixView v : inputs) stand_in(v, true);
  for (ConstMatrixView v : outputs) stand_in(v, false);
  return views;
}

void FromF32(CudaContext& ctx, ConstMatrixView f32, MatrixView original) {
  if (original.dtype == ElementType::kBF16 && !original.empty()) {
    Copy(ctx, f32, original);
  }
}

void AddQuotient(CudaContext& ctx, const double* value, double divisor,
                 double* sum) {
  AddQuotientKernel<<<1, 1, 0, ctx.stream()>>>(value, divisor, sum);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
