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
#include "kernels/cuda/rows.cuh"

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

// An operand of the grouped products: a view, or rows of one gathered by
// index (ExpertInput).
struct Operand {
  ConstMatrixView v;
  const int32_t* rows = nullptr;
  int64_t count = 0;  // rows gathered

  Operand(ConstMatrixView view) : v(view), count(view.rows) {}  // NOLINT
  Operand(ExpertInput input, int64_t gathered)
      : v(input.x),
        rows(input.rows),
        count(input.rows != nullptr ? gathered : input.x.rows) {}
};

// bf16 operands: the weights' kept copies, or copies of the views carved from
// the composite scratch (the grouped GEMM takes the plain scratch for its own
// arguments); gathered rows are converted as they are gathered.
class Bf16Operands {
 public:
  Bf16Operands(CudaContext& ctx, std::initializer_list<Operand> operands) {
    size_t bytes = 0;
    for (const Operand& o : operands) bytes += Bytes(o);
    char* next = static_cast<char*>(ctx.CompositeScratch(bytes));
    for (const Operand& o : operands) {
      copies_.push_back(Copy(ctx, o, next));
      next += Bytes(o);
    }
  }
  const __nv_bfloat16* operator[](size_t i) const { return copies_[i]; }

 private:
  // The weight's kept copy when it has one and is contiguous (the grouped
  // GEMM reads dense operands); else a copy made at `at`.
  static const __nv_bfloat16* Copy(CudaContext& ctx, const Operand& o,
                                   char* at) {
    const ConstMatrixView v = o.v;
    const __nv_bfloat16* kept = o.rows == nullptr && v.stride == v.cols
                                    ? ctx.Bf16WeightCopy(v)
                                    : nullptr;
    if (kept != nullptr) return kept;
    auto* copy = reinterpret_cast<__nv_bfloat16*>(at);
    if (o.rows != nullptr) {
      PackBf16Rows(ctx, v, o.rows, o.count, copy, v.cols);
    } else if (!v.empty()) {
      PackBf16(ctx, v, nullptr, 1, copy, v.cols);
    }
    return copy;
  }
  static size_t Bytes(const Operand& o) {
    return ScratchAlignUp(o.count * o.v.cols * sizeof(__nv_bfloat16));
  }
  std::vector<const __nv_bfloat16*> copies_;
};

// The per-expert path's fp32 rows: x itself, or its gathered rows in the
// composite scratch.
ConstMatrixView Fp32Rows(CudaContext& ctx, ExpertInput x, int64_t count) {
  if (x.rows == nullptr) return x.x;
  MatrixView gathered{static_cast<float*>(ctx.CompositeScratch(
                          ScratchAlignUp(count * x.x.cols * sizeof(float)))),
                      count, x.x.cols, x.x.cols};
  EmbeddingForward(ctx, x.x, x.rows, gathered);
  return gathered;
}

}  // namespace

void GroupedLinear(CudaContext& ctx, ExpertInput input, ConstMatrixView w,
                   const int32_t* offsets, int64_t experts, MatrixView y) {
  assert(w.rows % experts == 0 && input.x.cols == w.cols);
  assert(input.rows != nullptr || y.rows == input.x.rows);
  const int64_t in = w.cols, out = w.rows / experts, rows = y.rows;
  if (rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {y})) {
    const Bf16Operands bf16(ctx, {Operand(input, rows), w});
    GroupedGemm(ctx, bf16[0], bf16[1], offsets, experts, rows, in, out, y);
    return;
  }
  const ConstMatrixView x = Fp32Rows(ctx, input, rows);
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  assert(first[experts] == rows);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = first[e + 1] - first[e];
    if (count == 0) continue;
    Linear(ctx, x.Rows(first[e], count), ExpertWeight(w, experts, e),
           y.Rows(first[e], count), false);
  }
}

void GroupedLinearBackward(CudaContext& ctx, ExpertInput input,
                           ConstMatrixView w, const int32_t* offsets,
                           int64_t experts, ConstMatrixView dy, MatrixView dx,
                           bool accumulate_dx, MatrixView dw) {
  assert(w.rows % experts == 0 && input.x.cols == w.cols);
  assert(input.rows != nullptr || dy.rows == input.x.rows);
  const int64_t in = w.cols, out = w.rows / experts, rows = dy.rows;
  if (rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {dx, dw})) {
    // x is converted only for the weight gradient, which reads it.
    const ConstMatrixView none;
    const Bf16Operands bf16(
        ctx, {dw.empty() ? Operand(none) : Operand(input, rows), w, dy});
    if (!dx.empty()) {
      GroupedGemmDataGrad(ctx, bf16[2], bf16[1], offsets, experts, rows, in,
                          out, accumulate_dx, dx);
    }
    if (!dw.empty()) {
      GroupedGemmWeightGrad(ctx, bf16[2], bf16[0], offsets, experts, rows, in,
                            out, dw);
    }
    return;
  }
  if (!accumulate_dx && !dx.empty()) {
    GLM_CUDA_CHECK(cudaMemset2DAsync(dx.data, dx.stride * sizeof(float), 0,
                                     dx.cols * sizeof(float), dx.rows,
                                     ctx.stream()));
  }
  const ConstMatrixView x = Fp32Rows(ctx, input, rows);
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = first[e + 1] - first[e];
    if (count == 0) continue;
    LinearBackward(ctx, x.Rows(first[e], count), ExpertWeight(w, experts, e),
                   dy.Rows(first[e], count), RowsOrEmpty(dx, first[e], count),
                   dw.empty() ? MatrixView{} : ExpertWeight(dw, experts, e));
  }
}

}  // namespace glm::cuda
