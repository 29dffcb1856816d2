#include <cassert>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace glm::cuda {
namespace {

__global__ void CopyKernel(ConstMatrixView x, MatrixView y) {
  ForEachElement(x.rows, x.cols,
                 [&](int64_t r, int64_t c) { At(y, r, c) = At(x, r, c); });
}

__global__ void AxpyKernel(float alpha, ConstMatrixView x, MatrixView y) {
  ForEachElement(x.rows, x.cols, [&](int64_t r, int64_t c) {
    At(y, r, c) += alpha * At(x, r, c);
  });
}

__global__ void RepeatRowsKernel(ConstMatrixView x, int64_t repeats,
                                 MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    At(y, r, c) = At(x, r / repeats, c);
  });
}

__global__ void SumRowGroupsKernel(ConstMatrixView x, int64_t repeats,
                                   MatrixView y) {
  ForEachElement(y.rows, y.cols, [&](int64_t r, int64_t c) {
    float sum = At(y, r, c);
    for (int64_t i = 0; i < repeats; ++i) {
      sum = __fadd_rn(sum, At(x, r * repeats + i, c));
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
  CopyKernel<<<GridStrideBlocks(x.rows * x.cols), kBlockThreads, 0,
               ctx.stream()>>>(x, y);
  GLM_CUDA_CHECK_LAUNCH();
}

void Zero(CudaContext& ctx, MatrixView y) {
  if (y.empty() || y.rows == 0 || y.cols == 0) return;
  // A single row's stride is free; memset wants a pitch of its width or more.
  const int64_t pitch = y.rows == 1 ? y.cols : y.stride;
  GLM_CUDA_CHECK(cudaMemset2DAsync(y.data, pitch * sizeof(float), 0,
                                   y.cols * sizeof(float), y.rows,
                                   ctx.stream()));
}

void Axpy(CudaContext& ctx, float alpha, ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  if (x.rows == 0 || x.cols == 0) return;
  AxpyKernel<<<GridStrideBlocks(x.rows * x.cols), kBlockThreads, 0,
               ctx.stream()>>>(alpha, x, y);
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

void AddQuotient(CudaContext& ctx, const double* value, double divisor,
                 double* sum) {
  AddQuotientKernel<<<1, 1, 0, ctx.stream()>>>(value, divisor, sum);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
