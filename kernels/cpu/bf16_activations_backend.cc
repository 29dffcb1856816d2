#include "kernels/cpu/bf16_activations_backend.h"

#include <cassert>
#include <cstdint>
#include <memory>

#include "base/bf16.h"
#include "kernels/dtype_check.h"

namespace glm {
namespace {

bool IsBf16(ConstMatrixView view) {
  return !view.empty() && view.dtype == ElementType::kBF16;
}

// A contiguous F32 copy of `view`'s shape in `holder`, element (r, c) being
// value(r, c).
template <typename Value>
ConstMatrixView ContiguousCopy(ConstMatrixView view, Tensor* holder,
                               const Value& value) {
  *holder = Tensor({view.rows, view.cols}, nullptr);
  float* out = holder->data();
  for (int64_t r = 0; r < view.rows; ++r) {
    for (int64_t c = 0; c < view.cols; ++c) {
      out[r * view.cols + c] = value(r, c);
    }
  }
  return ConstMatrixView(out, view.rows, view.cols, view.cols);
}

// An operand the op reads, as the CPU backend takes it: an F32 view as it
// is, a bf16 one widened into `holder`.
ConstMatrixView Widened(ConstMatrixView view, Tensor* holder) {
  if (!IsBf16(view)) return view;
  const auto* bits = reinterpret_cast<const uint16_t*>(view.data);
  return ContiguousCopy(view, holder, [&](int64_t r, int64_t c) {
    return Bfloat16ToFloat32(bits[r * view.stride + c]);
  });
}

// An operand of a matrix product, as the CUDA bf16 mode's products read
// every operand (x, w, dy): in bf16, so an F32 one is rounded into `holder`.
ConstMatrixView ProductOperand(ConstMatrixView view, Tensor* holder) {
  if (view.empty() || IsBf16(view)) return Widened(view, holder);
  return ContiguousCopy(view, holder, [&](int64_t r, int64_t c) {
    return Bfloat16ToFloat32(Float32ToBfloat16(view.Row(r)[c]));
  });
}
IndexedRows ProductOperand(IndexedRows rows, Tensor* holder) {
  rows.x = ProductOperand(rows.x, holder);
  return rows;
}

// A product's weight: F32 (the CUDA backend reads its bf16 copy), rounded.
ConstMatrixView ProductWeight(const char* op, ConstMatrixView w,
                              Tensor* holder) {
  CheckF32(op, {w});
  return ProductOperand(w, holder);
}

// An operand the op writes: an F32 view as it is; for a bf16 one, a zeroed
// F32 buffer (ops that would add into it write it, as kernels/backend.h
// says of every bf16 output), rounded into the view when this goes out of
// scope, right after the op.
class Narrowed {
 public:
  explicit Narrowed(MatrixView view) : view_(view), f32_(view) {
    if (!IsBf16(view_)) return;
    holder_ = Tensor({view.rows, view.cols}, nullptr);
    f32_ = holder_.Matrix();
  }
  ~Narrowed() {
    if (holder_.empty()) return;
    auto* bits = reinterpret_cast<uint16_t*>(view_.data);
    const float* values = holder_.data();
    for (int64_t r = 0; r < view_.rows; ++r) {
      for (int64_t c = 0; c < view_.cols; ++c) {
        bits[r * view_.stride + c] =
            Float32ToBfloat16(values[r * view_.cols + c]);
      }
    }
  }
  Narrowed(const Narrowed&) = delete;
  Narrowed& operator=(const Narrowed&) = delete;

  MatrixView f32() const { return f32_; }

 private:
  MatrixView view_;
  MatrixView f32_;
  Tensor holder_;
};

}  // namespace

void Bf16ActivationsCpuBackend::Linear(ConstMatrixView x, ConstMatrixView w,
                                       MatrixView y, bool accumulate) {
  Tensor xh, wh;
  const ConstMatrixView xr = ProductOperand(x, &xh),
                        wr = ProductWeight("Bf16ActivationsCpuBackend::Linear",
                                           w, &wh);
  if (accumulate) {  // a bf16 y is refused by the CPU backend
    cpu_.Linear(xr, wr, y, true);
    return;
  }
  Narrowed yn(y);
  cpu_.Linear(xr, wr, yn.f32(), false);
}
void Bf16ActivationsCpuBackend::LinearAdd(ConstMatrixView x, ConstMatrixView w,
                                          ConstMatrixView addend,
                                          MatrixView y) {
  Tensor xh, wh;
  cpu_.LinearAdd(ProductOperand(x, &xh),
                 ProductWeight("Bf16ActivationsCpuBackend::LinearAdd", w, &wh),
                 addend, y);
}
void Bf16ActivationsCpuBackend::LinearBackward(ConstMatrixView x,
                                               ConstMatrixView w,
                                               ConstMatrixView dy,
                                               MatrixView dx, MatrixView dw) {
  Tensor xh, wh, dyh;
  Narrowed dxn(dx);
  cpu_.LinearBackward(
      ProductOperand(x, &xh),
      ProductWeight("Bf16ActivationsCpuBackend::LinearBackward", w, &wh),
      ProductOperand(dy, &dyh), dxn.f32(), dw);
}
void Bf16ActivationsCpuBackend::Copy(ConstMatrixView x, MatrixView y) {
  Tensor xh;
  Narrowed yn(y);
  cpu_.Copy(Widened(x, &xh), yn.f32());
}
void Bf16ActivationsCpuBackend::Axpy(float alpha, ConstMatrixView x,
                                     MatrixView y) {
  cpu_.Axpy(alpha, x, y);
}
void Bf16ActivationsCpuBackend::RepeatRows(ConstMatrixView x, int64_t repeats,
                                           MatrixView y) {
  Narrowed yn(y);
  cpu_.RepeatRows(x, repeats, yn.f32());
}
void Bf16ActivationsCpuBackend::SumRowGroups(ConstMatrixView x, int64_t repeats,
                                             MatrixView y) {
  Tensor xh;
  cpu_.SumRowGroups(Widened(x, &xh), repeats, y);
}
void Bf16ActivationsCpuBackend::EmbeddingForward(ConstMatrixView table,
                                                 const int32_t* ids,
                                                 MatrixView out) {
  // An F32 out needs an F32 table (the MoE gathers its experts' F32 rows).
  if (!IsBf16(out))
    CheckF32("Bf16ActivationsCpuBackend::EmbeddingForward", {table});
  Tensor th;
  Narrowed on(out);
  cpu_.EmbeddingForward(Widened(table, &th), ids, on.f32());
}
void Bf16ActivationsCpuBackend::EmbeddingBackward(ConstMatrixView dout,
                                                  const int32_t* ids,
                                                  MatrixView dtable) {
  cpu_.EmbeddingBackward(dout, ids, dtable);
}
void Bf16ActivationsCpuBackend::ScatterAddRows(ConstMatrixView src,
                                               const int32_t* rows,
                                               const float* scale,
                                               MatrixView out) {
  Tensor sh;
  cpu_.ScatterAddRows(Widened(src, &sh), rows, scale, out);
}
void Bf16ActivationsCpuBackend::ScatterAddRowsBackward(
    ConstMatrixView src, const int32_t* rows, const float* scale,
    ConstMatrixView dout, MatrixView dsrc, MatrixView dscale,
    const int32_t* dscale_rows) {
  Tensor sh;
  Narrowed dn(dsrc);
  cpu_.ScatterAddRowsBackward(Widened(src, &sh), rows, scale, dout, dn.f32(),
                              dscale, dscale_rows);
}
void Bf16ActivationsCpuBackend::RmsNormForward(ConstMatrixView x,
                                               const float* w, float eps,
                                               MatrixView y, float* rstd) {
  Narrowed yn(y);
  cpu_.RmsNormForward(x, w, eps, yn.f32(), rstd);
}
void Bf16ActivationsCpuBackend::RmsNormBackward(
    ConstMatrixView x, const float* w, const float* rstd, ConstMatrixView dy,
    ConstMatrixView residual, MatrixView dx, float* dw) {
  cpu_.RmsNormBackward(x, w, rstd, dy, residual, dx, dw);
}
void Bf16ActivationsCpuBackend::LayerNormForward(ConstMatrixView x,
                                                 const float* w, const float* b,
                                                 float eps, MatrixView y,
                                                 float* mean, float* rstd) {
  cpu_.LayerNormForward(x, w, b, eps, y, mean, rstd);
}
void Bf16ActivationsCpuBackend::LayerNormBackward(
    ConstMatrixView x, const float* w, const float* mean, const float* rstd,
    ConstMatrixView dy, MatrixView dx, float* dw, float* db) {
  cpu_.LayerNormBackward(x, w, mean, rstd, dy, dx, dw, db);
}
void Bf16ActivationsCpuBackend::SwiGluForward(ConstMatrixView gate,
                                              ConstMatrixView up,
                                              MatrixView out) {
  Tensor gh, uh;
  Narrowed on(out);
  cpu_.SwiGluForward(Widened(gate, &gh), Widened(up, &uh), on.f32());
}
void Bf16ActivationsCpuBackend::SwiGluBackward(ConstMatrixView gate,
                                               ConstMatrixView up,
                                               ConstMatrixView dout,
                                               MatrixView dgate,
                                               MatrixView dup) {
  Tensor gh, uh, dh;
  Narrowed dgn(dgate), dun(dup);
  cpu_.SwiGluBackward(Widened(gate, &gh), Widened(up, &uh), Widened(dout, &dh),
                      dgn.f32(), dun.f32());
}
void Bf16ActivationsCpuBackend::RopeForward(ConstMatrixView x,
                                            const int32_t* positions,
                                            int64_t rows_per_position,
                                            float theta, MatrixView y) {
  Narrowed yn(y);
  cpu_.RopeForward(x, positions, rows_per_position, theta, yn.f32());
}
void Bf16ActivationsCpuBackend::RopeBackward(ConstMatrixView dy,
                                             const int32_t* positions,
                                             int64_t rows_per_position,
                                             float theta, MatrixView dx) {
  Tensor dyh;
  Narrowed dxn(dx);
  cpu_.RopeBackward(Widened(dy, &dyh), positions, rows_per_position, theta,
                    dxn.f32());
}
void Bf16ActivationsCpuBackend::RouterForward(
    ConstMatrixView logits, const float* bias, const RouterSpec& spec,
    MatrixView scores, MatrixView weights, int32_t* indices) {
  cpu_.RouterForward(logits, bias, spec, scores, weights, indices);
}
void Bf16ActivationsCpuBackend::RouterBackward(ConstMatrixView scores,
                                               const int32_t* indices,
                                               ConstMatrixView dweights,
                                               const RouterSpec& spec,
                                               MatrixView dlogits) {
  cpu_.RouterBackward(scores, indices, dweights, spec, dlogits);
}
void Bf16ActivationsCpuBackend::GroupByExpert(const int32_t* expert,
                                              int64_t count, int64_t per_token,
                                              int64_t experts, int32_t* slots,
                                              int32_t* tokens,
                                              int32_t* offsets) {
  cpu_.GroupByExpert(expert, count, per_token, experts, slots, tokens, offsets);
}
void Bf16ActivationsCpuBackend::TokenRows(const int32_t* slots, int64_t count,
                                          int64_t per_token,
                                          int32_t* token_rows) {
  cpu_.TokenRows(slots, count, per_token, token_rows);
}
void Bf16ActivationsCpuBackend::AddRowGroups(ConstMatrixView src,
                                             const int32_t* sources,
                                             int64_t per_row,
                                             const float* scale,
                                             MatrixView out) {
  Tensor sh;
  cpu_.AddRowGroups(Widened(src, &sh), sources, per_row, scale, out);
}
void Bf16ActivationsCpuBackend::AddRowGroupsBackward(
    ConstMatrixView src, const int32_t* sources, int64_t per_row,
    const float* scale, ConstMatrixView dout, MatrixView dsrc,
    MatrixView dscale, const int32_t* dscale_rows) {
  Tensor sh;
  Narrowed dn(dsrc);
  cpu_.AddRowGroupsBackward(Widened(src, &sh), sources, per_row, scale, dout,
                            dn.f32(), dscale, dscale_rows);
}
void Bf16ActivationsCpuBackend::AddExpertLoads(const int32_t* offsets,
                                               int64_t experts,
                                               int32_t* loads) {
  cpu_.AddExpertLoads(offsets, experts, loads);
}
void Bf16ActivationsCpuBackend::GroupedLinear(IndexedRows x, ConstMatrixView w,
                                              const int32_t* offsets,
                                              int64_t experts, MatrixView y) {
  Tensor xh, wh;
  Narrowed yn(y);
  cpu_.GroupedLinear(
      ProductOperand(x, &xh),
      ProductWeight("Bf16ActivationsCpuBackend::GroupedLinear", w, &wh),
      offsets, experts, yn.f32());
}
void Bf16ActivationsCpuBackend::GroupedLinearBackward(
    IndexedRows x, ConstMatrixView w, const int32_t* offsets, int64_t experts,
    IndexedRows dy, MatrixView dx, bool accumulate_dx, MatrixView dw) {
  // A bf16 dx is written, never added to; a dy read by index (the combine's
  // gradient) is the F32 output gradient.
  if (accumulate_dx) {
    CheckF32("Bf16ActivationsCpuBackend::GroupedLinearBackward", {dx});
  }
  if (dy.indexed()) {
    CheckF32("Bf16ActivationsCpuBackend::GroupedLinearBackward", {dy.x});
  }
  Tensor xh, wh, dyh;
  Narrowed dxn(dx);
  cpu_.GroupedLinearBackward(
      ProductOperand(x, &xh),
      ProductWeight("Bf16ActivationsCpuBackend::GroupedLinearBackward", w, &wh),
      offsets, experts, ProductOperand(dy, &dyh), dxn.f32(), accumulate_dx, dw);
}
void Bf16ActivationsCpuBackend::CrossEntropyForward(ConstMatrixView logits,
                                                    const int32_t* targets,
                                                    double divisor,
                                                    double* sum) {
  cpu_.CrossEntropyForward(logits, targets, divisor, sum);
}
void Bf16ActivationsCpuBackend::CrossEntropyBackward(ConstMatrixView logits,
                                                     const int32_t* targets,
                                                     float scale,
                                                     MatrixView dlogits) {
  cpu_.CrossEntropyBackward(logits, targets, scale, dlogits);
}
void Bf16ActivationsCpuBackend::LinearCrossEntropy(
    ConstMatrixView x, ConstMatrixView w, const int32_t* targets,
    double divisor, float scale, MatrixView logits, double* sum, MatrixView dx,
    MatrixView dw) {
  Tensor xh, wh;
  Narrowed ln(logits);  // a work buffer: what it holds after is undefined
  cpu_.LinearCrossEntropy(
      ProductOperand(x, &xh),
      ProductWeight("Bf16ActivationsCpuBackend::LinearCrossEntropy", w, &wh),
      targets, divisor, scale, ln.f32(), sum, dx, dw);
}
void Bf16ActivationsCpuBackend::SparseAttentionForward(
    ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
    float scale, MatrixView out, float* lse) {
  Tensor qh, kh, vh;
  Narrowed on(out);
  cpu_.SparseAttentionForward(Widened(q, &qh), Widened(k, &kh), Widened(v, &vh),
                              keys, topk, full_queries, heads, scale, on.f32(),
                              lse);
}
void Bf16ActivationsCpuBackend::SparseAttentionBackward(
    ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
    float scale, ConstMatrixView out, const float* lse, ConstMatrixView dout,
    MatrixView dq, MatrixView dk, MatrixView dv, MatrixView key_weights) {
  Tensor qh, kh, vh, oh, dh;
  Narrowed dqn(dq), dkn(dk), dvn(dv);
  cpu_.SparseAttentionBackward(
      Widened(q, &qh), Widened(k, &kh), Widened(v, &vh), keys, topk,
      full_queries, heads, scale, Widened(out, &oh), lse, Widened(dout, &dh),
      dqn.f32(), dkn.f32(), dvn.f32(), key_weights);
}
void Bf16ActivationsCpuBackend::SparseAttentionKeyWeights(
    ConstMatrixView q, ConstMatrixView k, const int32_t* keys, int64_t topk,
    int64_t heads, float scale, const float* lse, MatrixView weights) {
  Tensor qh, kh;
  cpu_.SparseAttentionKeyWeights(Widened(q, &qh), Widened(k, &kh), keys, topk,
                                 heads, scale, lse, weights);
}
void Bf16ActivationsCpuBackend::LatentAttentionForward(
    ConstMatrixView q, ConstMatrixView kv, const int32_t* keys, int64_t topk,
    int64_t heads, float scale, MatrixView out, float* lse) {
  Tensor qh, kvh;
  Narrowed on(out);
  cpu_.LatentAttentionForward(Widened(q, &qh), Widened(kv, &kvh), keys, topk,
                              heads, scale, on.f32(), lse);
}
void Bf16ActivationsCpuBackend::LatentAttentionBackward(
    ConstMatrixView q, ConstMatrixView kv, const int32_t* keys, int64_t topk,
    int64_t heads, float scale, ConstMatrixView out, const float* lse,
    ConstMatrixView dout, MatrixView dq, MatrixView dkv,
    MatrixView key_weights) {
  Tensor qh, kvh, oh, dh;
  Narrowed dqn(dq), dkvn(dkv);
  cpu_.LatentAttentionBackward(Widened(q, &qh), Widened(kv, &kvh), keys, topk,
                               heads, scale, Widened(out, &oh), lse,
                               Widened(dout, &dh), dqn.f32(), dkvn.f32(),
                               key_weights);
}
void Bf16ActivationsCpuBackend::IndexerTopK(
    ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
    const int32_t* seq_start, int64_t query_offset, int64_t topk, float scale,
    KeptIndexerScores* keep, int32_t* keys) {
  cpu_.IndexerTopK(iq, ik, w, seq_start, query_offset, topk, scale, keep, keys);
}
void Bf16ActivationsCpuBackend::IndexerKlLoss(
    ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
    const int32_t* keys, int64_t topk, float scale, ConstMatrixView target,
    float coeff, const KeptIndexerScores* kept, MatrixView diq, MatrixView dik,
    MatrixView dw, double* sum) {
  cpu_.IndexerKlLoss(iq, ik, w, keys, topk, scale, target, coeff, kept, diq,
                     dik, dw, sum);
}
void Bf16ActivationsCpuBackend::RefreshComputeCopies(
    const std::vector<ConstFloatSpan>& weights) {
  cpu_.RefreshComputeCopies(weights);
}
double Bf16ActivationsCpuBackend::SquaredSum(
    const std::vector<ConstFloatSpan>& spans) {
  return cpu_.SquaredSum(spans);
}
void Bf16ActivationsCpuBackend::AdamWStep(
    const AdamWHyperparameters& hyper,
    const std::vector<AdamWTensor>& tensors) {
  cpu_.AdamWStep(hyper, tensors);
}

std::unique_ptr<Backend> MakeCpuTestBackend(bool bf16_activations,
                                            Allocator* memory) {
  if (!bf16_activations) return std::make_unique<CpuBackend>(memory);
  assert(memory == nullptr);
  return std::make_unique<Bf16ActivationsCpuBackend>();
}

}  // namespace glm
