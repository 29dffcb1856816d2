#include "kernels/cuda/grouped_linear.h"

#include <cuda_bf16.h>

#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/cuda/linear.cuh"

namespace glm::cuda {
namespace {

std::vector<int32_t> HostOffsets(CudaContext& ctx, const int32_t* offsets,
                                 int64_t experts) {
  std::vector<int32_t> host(experts + 1, 0);
  if (ctx.recording()) {
    ctx.FailRecording(
        "the per-expert products (fp32 mode, or widths the grouped GEMM does "
        "not take) read the expert loads on the host");
    return host;
  }
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

bool OutputFits(MatrixView v) {
  return v.empty() || (v.stride % kGroupedGemmOutputAlign == 0 &&
                       reinterpret_cast<uintptr_t>(v.data) % 16 == 0);
}

// Whether the grouped GEMM takes these products: bf16 mode, widths in
// 16-byte units, outputs it can store with TMA.
bool UseGroupedGemm(CudaContext& ctx, int64_t in, int64_t out,
                    std::initializer_list<MatrixView> outputs) {
  if (ctx.precision() != Precision::kBf16 || in % kGroupedGemmAlign != 0 ||
      out % kGroupedGemmAlign != 0) {
    return false;
  }
  for (MatrixView v : outputs) {
    if (!OutputFits(v)) return false;
  }
  return true;
}

// bf16 operands: the weights' kept copies, or copies of the views carved from
// the composite scratch (the grouped GEMM takes the plain scratch for its own
// arguments).
class Bf16Operands {
 public:
  Bf16Operands(CudaContext& ctx, std::initializer_list<ConstMatrixView> views) {
    size_t bytes = 0;
    for (ConstMatrixView v : views) bytes += Bytes(v);
    char* next = static_cast<char*>(ctx.CompositeScratch(bytes));
    for (ConstMatrixView v : views) {
      copies_.push_back(Copy(ctx, v, next));
      next += Bytes(v);
    }
  }
  const __nv_bfloat16* operator[](size_t i) const { return copies_[i]; }

 private:
  // The weight's kept copy when it has one and is contiguous (the grouped
  // GEMM reads dense operands); else a copy made at `at`.
  static const __nv_bfloat16* Copy(CudaContext& ctx, ConstMatrixView v,
                                   char* at) {
    const __nv_bfloat16* kept =
        v.stride == v.cols ? ctx.Bf16WeightCopy(v) : nullptr;
    if (kept != nullptr) return kept;
    auto* copy = reinterpret_cast<__nv_bfloat16*>(at);
    if (!v.empty()) PackBf16(ctx, v, nullptr, 1, copy, v.cols);
    return copy;
  }
  static size_t Bytes(ConstMatrixView v) {
    return ScratchAlignUp(v.rows * v.cols * sizeof(__nv_bfloat16));
  }
  std::vector<const __nv_bfloat16*> copies_;
};

}  // namespace

void GroupedLinear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                   const int32_t* offsets, int64_t experts, MatrixView y) {
  assert(w.rows % experts == 0 && x.cols == w.cols && y.rows == x.rows);
  const int64_t in = w.cols, out = w.rows / experts;
  if (x.rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {y})) {
    const Bf16Operands bf16(ctx, {x, w});
    GroupedGemm(ctx, bf16[0], bf16[1], offsets, experts, x.rows, in, out, y);
    return;
  }
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
                           bool accumulate_dx, MatrixView dw) {
  assert(w.rows % experts == 0 && dy.rows == x.rows);
  const int64_t in = w.cols, out = w.rows / experts;
  if (x.rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {dx, dw})) {
    const Bf16Operands bf16(ctx, {x, w, dy});
    if (!dx.empty()) {
      GroupedGemmDataGrad(ctx, bf16[2], bf16[1], offsets, experts, x.rows, in,
                          out, accumulate_dx, dx);
    }
    if (!dw.empty()) {
      GroupedGemmWeightGrad(ctx, bf16[2], bf16[0], offsets, experts, x.rows, in,
                            out, dw);
    }
    return;
  }
  if (!accumulate_dx && !dx.empty()) {
    GLM_CUDA_CHECK(cudaMemset2DAsync(dx.data, dx.stride * sizeof(float), 0,
                                     dx.cols * sizeof(float), dx.rows,
                                     ctx.stream()));
  }
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = first[e + 1] - first[e];
    if (rows == 0) continue;
    LinearBackward(ctx, x.Rows(first[e], rows), ExpertWeight(w, experts, e),
                   dy.Rows(first[e], rows), RowsOrEmpty(dx, first[e], rows),
                   dw.empty() ? MatrixView{} : ExpertWeight(dw, experts, e));
  }
}

}  // namespace glm::cuda
