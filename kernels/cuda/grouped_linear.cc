#include "kernels/cuda/grouped_linear.h"

#include <cuda_bf16.h>

#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.cuh"
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

// Whether the grouped GEMM takes these products: bf16 mode, widths in
// 16-byte units, outputs it can store with TMA.
bool UseGroupedGemm(CudaContext& ctx, int64_t in, int64_t out,
                    std::initializer_list<MatrixView> outputs) {
  if (ctx.precision() != Precision::kBf16 || in % kGroupedGemmAlign != 0 ||
      out % kGroupedGemmAlign != 0) {
    return false;
  }
  for (MatrixView v : outputs) {
    if (!GroupedGemmStores(v)) return false;
  }
  return true;
}

// bf16 operands: BF16 views as they are, the weights' kept copies, or copies
// of the views carved from the composite scratch (the grouped GEMM takes the
// plain scratch for its own arguments); gathered rows are converted as they
// are gathered.
class Bf16Operands {
 public:
  Bf16Operands(CudaContext& ctx, std::initializer_list<IndexedRows> operands) {
    size_t bytes = 0;
    for (const IndexedRows& o : operands) bytes += Bytes(o);
    char* next = static_cast<char*>(ctx.CompositeScratch(bytes));
    for (const IndexedRows& o : operands) {
      copies_.push_back(Copy(ctx, o, next));
      next += Bytes(o);
    }
  }
  const __nv_bfloat16* operator[](size_t i) const { return copies_[i]; }

 private:
  // A dense operand (the grouped GEMM reads those) that is bf16 already:
  // needs no copy.
  static bool UsedAsItIs(const IndexedRows& o) {
    return !o.indexed() && o.x.dtype == ElementType::kBF16 &&
           o.x.stride == o.x.cols;
  }
  // The operand itself, or the weight's kept copy when it has one and is
  // contiguous; else a copy made at `at`.
  static const __nv_bfloat16* Copy(CudaContext& ctx, const IndexedRows& o,
                                   char* at) {
    const ConstMatrixView v = o.x;
    if (UsedAsItIs(o)) return reinterpret_cast<const __nv_bfloat16*>(v.data);
    const __nv_bfloat16* kept =
        !o.indexed() && v.stride == v.cols ? ctx.Bf16WeightCopy(v) : nullptr;
    if (kept != nullptr) return kept;
    auto* copy = reinterpret_cast<__nv_bfloat16*>(at);
    if (o.indexed()) {
      PackBf16Rows(ctx, v, o.rows, o.scale, o.count, copy, v.cols);
    } else if (!v.empty()) {
      PackBf16(ctx, v, nullptr, 1, copy, v.cols);
    }
    return copy;
  }
  static size_t Bytes(const IndexedRows& o) {
    if (UsedAsItIs(o)) return 0;
    return ScratchAlignUp(o.count * o.x.cols * sizeof(__nv_bfloat16));
  }
  std::vector<const __nv_bfloat16*> copies_;
};

// The per-expert path's rows: x itself, or its gathered (and scaled) rows at
// `at` (GatheredRowsBytes of the composite scratch), in x's dtype.
size_t GatheredRowsBytes(const IndexedRows& x) {
  return x.indexed()
             ? ScratchAlignUp(x.count * x.x.cols * ElementBytes(x.x.dtype))
             : 0;
}
ConstMatrixView GatheredRows(CudaContext& ctx, const IndexedRows& x, char* at) {
  if (!x.indexed()) return x.x;
  if (x.x.dtype == ElementType::kBF16) {
    PackBf16Rows(ctx, x.x, x.rows, x.scale, x.count,
                 reinterpret_cast<__nv_bfloat16*>(at), x.x.cols);
    return {reinterpret_cast<const float*>(at), x.count, x.x.cols, x.x.cols,
            ElementType::kBF16};
  }
  MatrixView gathered{reinterpret_cast<float*>(at), x.count, x.x.cols,
                      x.x.cols};
  GatherRows(ctx, x.x, x.rows, x.scale, gathered);
  return gathered;
}

}  // namespace

void GroupedLinear(CudaContext& ctx, IndexedRows x, ConstMatrixView w,
                   const int32_t* offsets, int64_t experts, MatrixView y) {
  assert(w.rows % experts == 0 && x.x.cols == w.cols && x.count == y.rows);
  const int64_t in = w.cols, out = w.rows / experts, rows = y.rows;
  if (rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {y})) {
    const Bf16Operands bf16(ctx, {x, w});
    GroupedGemm(ctx, bf16[0], bf16[1], offsets, experts, rows, in, out, y);
    return;
  }
  const ConstMatrixView rows_x = GatheredRows(
      ctx, x, static_cast<char*>(ctx.CompositeScratch(GatheredRowsBytes(x))));
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  assert(first[experts] == rows);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = first[e + 1] - first[e];
    if (count == 0) continue;
    Linear(ctx, rows_x.Rows(first[e], count), ExpertWeight(w, experts, e),
           y.Rows(first[e], count), false);
  }
}

void GroupedLinearBackward(CudaContext& ctx, IndexedRows x, ConstMatrixView w,
                           const int32_t* offsets, int64_t experts,
                           IndexedRows dy, MatrixView dx, bool accumulate_dx,
                           MatrixView dw) {
  assert(w.rows % experts == 0 && x.x.cols == w.cols && x.count == dy.count);
  assert(dy.x.cols == w.rows / experts);
  const int64_t in = w.cols, out = w.rows / experts, rows = dy.count;
  if (rows == 0) return;
  if (UseGroupedGemm(ctx, in, out, {dx, dw})) {
    // x is converted only for the weight gradient, which reads it.
    const Bf16Operands bf16(
        ctx, {dw.empty() ? IndexedRows() : x, IndexedRows(w), dy});
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
  // Both gathers in one composite scratch buffer, x's first, then an F32
  // stand-in for a BF16 dx (written, never added to): the products add in
  // F32, and it is rounded once at the end.
  const size_t x_bytes = GatheredRowsBytes(x), dy_bytes = GatheredRowsBytes(dy);
  const bool dx_stand_in = dx.dtype == ElementType::kBF16;
  const size_t dx_bytes =
      dx_stand_in ? ScratchAlignUp(dx.rows * dx.cols * sizeof(float)) : 0;
  char* at =
      static_cast<char*>(ctx.CompositeScratch(x_bytes + dy_bytes + dx_bytes));
  const ConstMatrixView rows_x = GatheredRows(ctx, x, at);
  const ConstMatrixView rows_dy = GatheredRows(ctx, dy, at + x_bytes);
  const MatrixView dx_sum =
      dx_stand_in
          ? MatrixView{reinterpret_cast<float*>(at + x_bytes + dy_bytes),
                       dx.rows, dx.cols, dx.cols}
          : dx;
  if (!accumulate_dx) Zero(ctx, dx_sum);
  const std::vector<int32_t> first = HostOffsets(ctx, offsets, experts);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = first[e + 1] - first[e];
    if (count == 0) continue;
    LinearBackward(ctx, rows_x.Rows(first[e], count),
                   ExpertWeight(w, experts, e), rows_dy.Rows(first[e], count),
                   RowsOrEmpty(dx_sum, first[e], count),
                   dw.empty() ? MatrixView{} : ExpertWeight(dw, experts, e));
  }
  if (dx_stand_in) FromF32(ctx, dx_sum, dx);
}

}  // namespace glm::cuda
