#include "kernels/cuda/grouped_linear.h"

#include <cassert>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/linear.cuh"

namespace glm::cuda {
namespace {

std::vector<int32_t> HostOffsets(CudaContext& ctx, const int32_t* offsets,
                                 int64_t experts) {
  std::vector<int32_t> host(experts + 1);
  GLM_CUDA_CHECK(cudaMemcpyAsync(host.data(), offsets,
                                 host.size() * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, ctx.stream()));
  GLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  return host;
}

template <typename View>
View ExpertWeight(View w, int64_t experts, int64_t e) {
  const int64_t out = w.rows / experts;
  return w.Rows(e * out, out);
}

}  // namespace

void GroupedLinear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                   const int32_t* offsets, int64_t experts, MatrixView y) {
  assert(w.rows % experts == 0 && x.cols == w.cols && y.rows == x.rows);
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  assert(first[experts] == x.rows);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = first[e + 1] - first[e];
    if (rows == 0) continue;
    Linear(ctx, x.Rows(first[e], rows), ExpertWeight(w, experts, e),
           y.Rows(first[e], rows), false);
  }
}

void GroupedLinearBackward(CudaContext& ctx, ConstMatrixView x,
                           ConstMatrixView w, const int32_t* offsets,
                           int64_t experts, ConstMatrixView dy, MatrixView dx,
                           MatrixView dw) {
  assert(w.rows % experts == 0 && dy.rows == x.rows);
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = first[e + 1] - first[e];
    if (rows == 0) continue;
    LinearBackward(ctx, x.Rows(first[e], rows), ExpertWeight(w, experts, e),
                   dy.Rows(first[e], rows),
                   dx.empty() ? MatrixView{} : dx.Rows(first[e], rows),
                   dw.empty() ? MatrixView{} : ExpertWeight(dw, experts, e));
  }
}

}  // namespace glm::cuda
