#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/router.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/sparse_attention.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/dtype_check.h"

namespace glm {

void CpuBackend::CheckHeld(const char* op,
                           std::initializer_list<const void*> pointers) const {
  if (memory_ == nullptr) return;
  for (const void* pointer : pointers) {
    if (pointer != nullptr && !memory_->Holds(pointer)) {
      std::fprintf(stderr,
                   "CpuBackend::%s: an operand is not in the backend's memory "
                   "(%s); a device backend could not read it\n",
                   op, memory_->Name().c_str());
      std::abort();
    }
  }
}

void CpuBackend::Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                        bool accumulate) {
  CheckHeld("Linear", {x.data, w.data, y.data});
  CheckF32("CpuBackend::Linear", {x, w, y});
  cpu::LinearForward(x, w, y, accumulate);
}
void CpuBackend::LinearAdd(ConstMatrixView x, ConstMatrixView w,
                           ConstMatrixView addend, MatrixView y) {
  CheckHeld("LinearAdd", {x.data, w.data, addend.data, y.data});
  CheckF32("CpuBackend::LinearAdd", {x, w, addend, y});
  assert(addend.rows == y.rows && addend.cols == y.cols);
  // The product rounded, then the addend added: the sum Linear and Axpy
  // give, whatever order the product's own sums take.
  if (addend.data == y.data) {
    cpu::LinearForward(x, w, y, /*accumulate=*/true);
    return;
  }
  cpu::LinearForward(x, w, y, /*accumulate=*/false);
  cpu::Axpy(1.f, addend, y);
}
void CpuBackend::LinearBackward(ConstMatrixView x, ConstMatrixView w,
                                ConstMatrixView dy, MatrixView dx,
                                MatrixView dw) {
  CheckHeld("LinearBackward", {x.data, w.data, dy.data, dx.data, dw.data});
  CheckF32("CpuBackend::LinearBackward", {x, w, dy, dx, dw});
  cpu::LinearBackward(x, w, dy, dx, dw);
}
void CpuBackend::Copy(ConstMatrixView x, MatrixView y) {
  CheckHeld("Copy", {x.data, y.data});
  CheckF32("CpuBackend::Copy", {x, y});
  cpu::Copy(x, y);
}
void CpuBackend::Axpy(float alpha, ConstMatrixView x, MatrixView y) {
  CheckHeld("Axpy", {x.data, y.data});
  CheckF32("CpuBackend::Axpy", {x, y});
  cpu::Axpy(alpha, x, y);
}
void CpuBackend::RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y) {
  CheckHeld("RepeatRows", {x.data, y.data});
  CheckF32("CpuBackend::RepeatRows", {x, y});
  cpu::RepeatRows(x, repeats, y);
}
void CpuBackend::SumRowGroups(ConstMatrixView x, int64_t repeats,
                              MatrixView y) {
  CheckHeld("SumRowGroups", {x.data, y.data});
  CheckF32("CpuBackend::SumRowGroups", {x, y});
  cpu::SumRowGroups(x, repeats, y);
}
void CpuBackend::EmbeddingForward(ConstMatrixView table, const int32_t* ids,
                                  MatrixView out) {
  CheckHeld("EmbeddingForward", {table.data, ids, out.data});
  CheckF32("CpuBackend::EmbeddingForward", {table, out});
  cpu::GatherRows(table, ids, out);
}
void CpuBackend::EmbeddingBackward(ConstMatrixView dout, const int32_t* ids,
                                   MatrixView dtable) {
  CheckHeld("EmbeddingBackward", {dout.data, ids, dtable.data});
  CheckF32("CpuBackend::EmbeddingBackward", {dout, dtable});
  cpu::ScatterAddRows(dout, ids, nullptr, dtable);
}
void CpuBackend::ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                                const float* scale, MatrixView out) {
  CheckHeld("ScatterAddRows", {src.data, rows, scale, out.data});
  CheckF32("CpuBackend::ScatterAddRows", {src, out});
  cpu::ScatterAddRows(src, rows, scale, out);
}
void CpuBackend::ScatterAddRowsBackward(ConstMatrixView src,
                                        const int32_t* rows, const float* scale,
                                        ConstMatrixView dout, MatrixView dsrc,
                                        MatrixView dscale,
                                        const int32_t* dscale_rows) {
  CheckHeld("ScatterAddRowsBackward", {src.data, rows, scale, dout.data,
                                       dsrc.data, dscale.data, dscale_rows});
  CheckF32("CpuBackend::ScatterAddRowsBackward", {src, dout, dsrc, dscale});
  cpu::ScatterAddRowsBackward(src, rows, scale, dout, dsrc, dscale,
                              dscale_rows);
}
void CpuBackend::RmsNormForward(ConstMatrixView x, const float* w, float eps,
                                MatrixView y, float* rstd) {
  CheckHeld("RmsNormForward", {x.data, w, y.data, rstd});
  CheckF32("CpuBackend::RmsNormForward", {x, y});
  cpu::RmsNormForward(x, w, eps, y, rstd);
}
void CpuBackend::RmsNormBackward(ConstMatrixView x, const float* w,
                                 const float* rstd, ConstMatrixView dy,
                                 ConstMatrixView residual, MatrixView dx,
                                 float* dw) {
  CheckHeld("RmsNormBackward",
            {x.data, w, rstd, dy.data, residual.data, dx.data, dw});
  CheckF32("CpuBackend::RmsNormBackward", {x, dy, residual, dx});
  cpu::RmsNormBackward(x, w, rstd, dy, residual, dx, dw);
}
void CpuBackend::LayerNormForward(ConstMatrixView x, const float* w,
                                  const float* b, float eps, MatrixView y,
                                  float* mean, float* rstd) {
  CheckHeld("LayerNormForward", {x.data, w, b, y.data, mean, rstd});
  CheckF32("CpuBackend::LayerNormForward", {x, y});
  cpu::LayerNormForward(x, w, b, eps, y, mean, rstd);
}
void CpuBackend::LayerNormBackward(ConstMatrixView x, const float* w,
                                   const float* mean, const float* rstd,
                                   ConstMatrixView dy, MatrixView dx, float* dw,
                                   float* db) {
  CheckHeld("LayerNormBackward",
            {x.data, w, mean, rstd, dy.data, dx.data, dw, db});
  CheckF32("CpuBackend::LayerNormBackward", {x, dy, dx});
  cpu::LayerNormBackward(x, w, mean, rstd, dy, dx, dw, db);
}
void CpuBackend::SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                               MatrixView out) {
  CheckHeld("SwiGluForward", {gate.data, up.data, out.data});
  CheckF32("CpuBackend::SwiGluForward", {gate, up, out});
  cpu::SwiGluForward(gate, up, out);
}
void CpuBackend::SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                                ConstMatrixView dout, MatrixView dgate,
                                MatrixView dup) {
  CheckHeld("SwiGluBackward",
            {gate.data, up.data, dout.data, dgate.data, dup.data});
  CheckF32("CpuBackend::SwiGluBackward", {gate, up, dout, dgate, dup});
  cpu::SwiGluBackward(gate, up, dout, dgate, dup);
}
void CpuBackend::RopeForward(ConstMatrixView x, const int32_t* positions,
                             int64_t rows_per_position, float theta,
                             MatrixView y) {
  CheckHeld("RopeForward", {x.data, positions, y.data});
  CheckF32("CpuBackend::RopeForward", {x, y});
  cpu::RopeForward(x, positions, rows_per_position, theta, y);
}
void CpuBackend::RopeBackward(ConstMatrixView dy, const int32_t* positions,
                              int64_t rows_per_position, float theta,
                              MatrixView dx) {
  CheckHeld("RopeBackward", {dy.data, positions, dx.data});
  CheckF32("CpuBackend::RopeBackward", {dy, dx});
  cpu::RopeBackward(dy, positions, rows_per_position, theta, dx);
}
void CpuBackend::RouterForward(ConstMatrixView logits, const float* bias,
                               const RouterSpec& spec, MatrixView scores,
                               MatrixView weights, int32_t* indices) {
  CheckHeld("RouterForward",
            {logits.data, bias, scores.data, weights.data, indices});
  CheckF32("CpuBackend::RouterForward", {logits, scores, weights});
  cpu::RouterForward(logits, bias, spec, scores, weights, indices);
}
void CpuBackend::RouterBackward(ConstMatrixView scores, const int32_t* indices,
                                ConstMatrixView dweights,
                                const RouterSpec& spec, MatrixView dlogits) {
  CheckHeld("RouterBackward",
            {scores.data, indices, dweights.data, dlogits.data});
  CheckF32("CpuBackend::RouterBackward", {scores, dweights, dlogits});
  cpu::RouterBackward(scores, indices, dweights, spec, dlogits);
}
void CpuBackend::TokenRows(const int32_t* slots, int64_t count,
                           int64_t per_token, int32_t* token_rows) {
  CheckHeld("TokenRows", {slots, token_rows});
  cpu::TokenRows(slots, count, per_token, token_rows);
}
void CpuBackend::AddRowGroups(ConstMatrixView src, const int32_t* sources,
                              int64_t per_row, const float* scale,
                              MatrixView out) {
  CheckHeld("AddRowGroups", {src.data, sources, scale, out.data});
  CheckF32("CpuBackend::AddRowGroups", {src, out});
  cpu::AddRowGroups(src, sources, per_row, scale, out);
}
void CpuBackend::AddRowGroupsBackward(ConstMatrixView src,
                                      const int32_t* sources, int64_t per_row,
                                      const float* scale, ConstMatrixView dout,
                                      MatrixView dsrc, MatrixView dscale,
                                      const int32_t* dscale_rows) {
  CheckHeld("AddRowGroupsBackward", {src.data, sources, scale, dout.data,
                                     dsrc.data, dscale.data, dscale_rows});
  CheckF32("CpuBackend::AddRowGroupsBackward", {src, dout, dsrc, dscale});
  cpu::AddRowGroupsBackward(src, sources, per_row, scale, dout, dsrc, dscale,
                            dscale_rows);
}
void CpuBackend::GroupByExpert(const int32_t* expert, int64_t count,
                               int64_t per_token, int64_t experts,
                               int32_t* slots, int32_t* tokens,
                               int32_t* offsets) {
  CheckHeld("GroupByExpert", {expert, slots, tokens, offsets});
  cpu::GroupByExpert(expert, count, per_token, experts, slots, tokens, offsets);
}
void CpuBackend::AddExpertLoads(const int32_t* offsets, int64_t experts,
                                int32_t* loads) {
  CheckHeld("AddExpertLoads", {offsets, loads});
  cpu::AddExpertLoads(offsets, experts, loads);
}
void CpuBackend::GroupedLinear(IndexedRows x, ConstMatrixView w,
                               const int32_t* offsets, int64_t experts,
                               MatrixView y) {
  CheckHeld("GroupedLinear",
            {x.x.data, x.rows, x.scale, w.data, offsets, y.data});
  CheckF32("CpuBackend::GroupedLinear", {x.x, w, y});
  cpu::GroupedLinearForward(x, w, offsets, experts, y);
}
void CpuBackend::GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                                       const int32_t* offsets, int64_t experts,
                                       IndexedRows dy, MatrixView dx,
                                       bool accumulate_dx, MatrixView dw) {
  CheckHeld("GroupedLinearBackward",
            {x.x.data, x.rows, x.scale, w.data, offsets, dy.x.data, dy.rows,
             dy.scale, dx.data, dw.data});
  CheckF32("CpuBackend::GroupedLinearBackward", {x.x, w, dy.x, dx, dw});
  if (!accumulate_dx) cpu::Zero(dx);
  cpu::GroupedLinearBackward(x, w, offsets, experts, dy, dx, dw);
}
void CpuBackend::CrossEntropyForward(ConstMatrixView logits,
                                     const int32_t* targets, double divisor,
                                     double* sum) {
  CheckHeld("CrossEntropyForward", {logits.data, targets, sum});
  CheckF32("CpuBackend::CrossEntropyForward", {logits});
  *sum += cpu::CrossEntropyForward(logits, targets) / divisor;
}
void CpuBackend::CrossEntropyBackward(ConstMatrixView logits,
                                      const int32_t* targets, float scale,
                                      MatrixView dlogits) {
  CheckHeld("CrossEntropyBackward", {logits.data, targets, dlogits.data});
  CheckF32("CpuBackend::CrossEntropyBackward", {logits, dlogits});
  cpu::CrossEntropyBackward(logits, targets, scale, dlogits);
}
void CpuBackend::LinearCrossEntropy(ConstMatrixView x, ConstMatrixView w,
                                    const int32_t* targets, double divisor,
                                    float scale, MatrixView logits, double* sum,
                                    MatrixView dx, MatrixView dw) {
  CheckHeld("LinearCrossEntropy",
            {x.data, w.data, targets, logits.data, sum, dx.data, dw.data});
  CheckF32("CpuBackend::LinearCrossEntropy", {x, w, logits, dx, dw});
  cpu::LinearForward(x, w, logits, false);
  *sum += cpu::CrossEntropyForward(logits, targets) / divisor;
  std::vector<float> dlogits(logits.rows * logits.cols, 0.f);
  const MatrixView d{dlogits.data(), logits.rows, logits.cols, logits.cols};
  cpu::CrossEntropyBackward(logits, targets, scale, d);
  cpu::LinearBackward(x, w, d, dx, dw);
}
void CpuBackend::SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                                        ConstMatrixView v, const int32_t* keys,
                                        int64_t topk, int64_t full_queries,
                                        int64_t heads, float scale,
                                        MatrixView out, float* lse) {
  CheckHeld("SparseAttentionForward",
            {q.data, k.data, v.data, keys, out.data, lse});
  CheckF32("CpuBackend::SparseAttentionForward", {q, k, v, out});
  cpu::CheckFullQueries("SparseAttentionForward", keys, topk, full_queries,
                        q.rows / heads, k.rows / heads);
  cpu::SparseAttentionForward(q, k, v, keys, topk, heads, scale, out, lse);
}
void CpuBackend::SparseAttentionBackward(
    ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
    float scale, ConstMatrixView out, const float* lse, ConstMatrixView dout,
    MatrixView dq, MatrixView dk, MatrixView dv, MatrixView key_weights) {
  CheckHeld("SparseAttentionBackward",
            {q.data, k.data, v.data, keys, out.data, lse, dout.data, dq.data,
             dk.data, dv.data, key_weights.data});
  CheckF32("CpuBackend::SparseAttentionBackward",
           {q, k, v, out, dout, dq, dk, dv, key_weights});
  cpu::CheckFullQueries("SparseAttentionBackward", keys, topk, full_queries,
                        q.rows / heads, k.rows / heads);
  // The kernel adds into the gradients; the op writes them.
  for (MatrixView grad : {dq, dk, dv}) cpu::Zero(grad);
  cpu::SparseAttentionBackward(q, k, v, keys, topk, heads, scale, out, lse,
                               dout, dq, dk, dv);
  // The probabilities again, as the forward's key weights form them: the
  // same values bit for bit.
  if (!key_weights.empty()) {
    cpu::SparseAttentionKeyWeights(q, k, keys, topk, heads, scale, lse,
                                   key_weights);
  }
}
void CpuBackend::SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                                           const int32_t* keys, int64_t topk,
                                           int64_t heads, float scale,
                                           const float* lse,
                                           MatrixView weights) {
  CheckHeld("SparseAttentionKeyWeights",
            {q.data, k.data, keys, lse, weights.data});
  CheckF32("CpuBackend::SparseAttentionKeyWeights", {q, k, weights});
  cpu::SparseAttentionKeyWeights(q, k, keys, topk, heads, scale, lse, weights);
}
void CpuBackend::LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                                        const int32_t* keys, int64_t topk,
                                        int64_t heads, float scale,
                                        MatrixView out, float* lse) {
  CheckHeld("LatentAttentionForward", {q.data, kv.data, keys, out.data, lse});
  CheckF32("CpuBackend::LatentAttentionForward", {q, kv, out});
  cpu::LatentAttentionForward(q, kv, keys, topk, heads, scale, out, lse);
}
void CpuBackend::LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                                         const int32_t* keys, int64_t topk,
                                         int64_t heads, float scale,
                                         ConstMatrixView out, const float* lse,
                                         ConstMatrixView dout, MatrixView dq,
                                         MatrixView dkv,
                                         MatrixView key_weights) {
  CheckHeld("LatentAttentionBackward",
            {q.data, kv.data, keys, out.data, lse, dout.data, dq.data, dkv.data,
             key_weights.data});
  CheckF32("CpuBackend::LatentAttentionBackward",
           {q, kv, out, dout, dq, dkv, key_weights});
  for (MatrixView grad : {dq, dkv}) cpu::Zero(grad);
  cpu::LatentAttentionBackward(q, kv, keys, topk, heads, scale, lse, dout, dq,
                               dkv);
  if (!key_weights.empty()) {
    cpu::LatentAttentionKeyWeights(q, kv, keys, topk, heads, scale, lse,
                                   key_weights);
  }
}
void CpuBackend::IndexerTopK(ConstMatrixView iq, ConstMatrixView ik,
                             ConstMatrixView w, const int32_t* seq_start,
                             int64_t query_offset, int64_t topk, float scale,
                             KeptIndexerScores* /*keep: the loss scores
                                                   again*/
                             ,
                             int32_t* keys) {
  CheckHeld("IndexerTopK", {iq.data, ik.data, w.data, seq_start, keys});
  CheckF32("CpuBackend::IndexerTopK", {iq, ik, w});
  cpu::IndexerTopK(iq, ik, w, seq_start, query_offset, topk, scale, keys);
}
void CpuBackend::IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik,
                               ConstMatrixView w, const int32_t* keys,
                               int64_t topk, float scale,
                               ConstMatrixView target, float coeff,
                               const KeptIndexerScores* /*kept: none*/,
                               MatrixView diq, MatrixView dik, MatrixView dw,
                               double* sum) {
  CheckHeld("IndexerKlLoss", {iq.data, ik.data, w.data, keys, target.data,
                              diq.data, dik.data, dw.data, sum});
  CheckF32("CpuBackend::IndexerKlLoss", {iq, ik, w, target, diq, dik, dw});
  *sum += cpu::IndexerKlLoss(iq, ik, w, keys, topk, scale, target, coeff, diq,
                             dik, dw);
}

double CpuBackend::SquaredSum(const std::vector<ConstFloatSpan>& spans) {
  for (const ConstFloatSpan& span : spans) CheckHeld("SquaredSum", {span.data});
  return cpu::SquaredSum(spans);
}

void CpuBackend::AdamWStep(const AdamWHyperparameters& hyper,
                           const std::vector<AdamWTensor>& tensors) {
  for (const AdamWTensor& t : tensors) {
    CheckHeld("AdamWStep", {t.value, t.grad, t.exp_avg, t.exp_avg_sq});
  }
  cpu::AdamWStep(hyper, tensors);
}

}  // namespace glm
