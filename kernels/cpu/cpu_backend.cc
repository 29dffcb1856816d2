#include "kernels/cpu/cpu_backend.h"

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

namespace glm {

void CpuBackend::Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                        bool accumulate) {
  cpu::LinearForward(x, w, y, accumulate);
}
void CpuBackend::LinearBackward(ConstMatrixView x, ConstMatrixView w,
                                ConstMatrixView dy, MatrixView dx,
                                MatrixView dw) {
  cpu::LinearBackward(x, w, dy, dx, dw);
}
void CpuBackend::Copy(ConstMatrixView x, MatrixView y) { cpu::Copy(x, y); }
void CpuBackend::Axpy(float alpha, ConstMatrixView x, MatrixView y) {
  cpu::Axpy(alpha, x, y);
}
void CpuBackend::EmbeddingForward(ConstMatrixView table, const int32_t* ids,
                                  MatrixView out) {
  cpu::GatherRows(table, ids, out);
}
void CpuBackend::EmbeddingBackward(ConstMatrixView dout, const int32_t* ids,
                                   MatrixView dtable) {
  cpu::ScatterAddRows(dout, ids, nullptr, dtable);
}
void CpuBackend::ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                                const float* scale, MatrixView out) {
  cpu::ScatterAddRows(src, rows, scale, out);
}
void CpuBackend::ScatterAddRowsBackward(ConstMatrixView src,
                                        const int32_t* rows, const float* scale,
                                        ConstMatrixView dout, MatrixView dsrc,
                                        float* dscale) {
  cpu::ScatterAddRowsBackward(src, rows, scale, dout, dsrc, dscale);
}
void CpuBackend::RmsNormForward(ConstMatrixView x, const float* w, float eps,
                                MatrixView y, float* rstd) {
  cpu::RmsNormForward(x, w, eps, y, rstd);
}
void CpuBackend::RmsNormBackward(ConstMatrixView x, const float* w,
                                 const float* rstd, ConstMatrixView dy,
                                 MatrixView dx, float* dw) {
  cpu::RmsNormBackward(x, w, rstd, dy, dx, dw);
}
void CpuBackend::LayerNormForward(ConstMatrixView x, const float* w,
                                  const float* b, float eps, MatrixView y,
                                  float* mean, float* rstd) {
  cpu::LayerNormForward(x, w, b, eps, y, mean, rstd);
}
void CpuBackend::LayerNormBackward(ConstMatrixView x, const float* w,
                                   const float* mean, const float* rstd,
                                   ConstMatrixView dy, MatrixView dx, float* dw,
                                   float* db) {
  cpu::LayerNormBackward(x, w, mean, rstd, dy, dx, dw, db);
}
void CpuBackend::SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                               MatrixView out) {
  cpu::SwiGluForward(gate, up, out);
}
void CpuBackend::SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                                ConstMatrixView dout, MatrixView dgate,
                                MatrixView dup) {
  cpu::SwiGluBackward(gate, up, dout, dgate, dup);
}
void CpuBackend::RopeForward(ConstMatrixView x, const int32_t* positions,
                             int64_t rows_per_position, float theta,
                             MatrixView y) {
  cpu::RopeForward(x, positions, rows_per_position, theta, y);
}
void CpuBackend::RopeBackward(ConstMatrixView dy, const int32_t* positions,
                              int64_t rows_per_position, float theta,
                              MatrixView dx) {
  cpu::RopeBackward(dy, positions, rows_per_position, theta, dx);
}
void CpuBackend::RouterForward(ConstMatrixView logits, const float* bias,
                               const RouterSpec& spec, MatrixView scores,
                               MatrixView weights, int32_t* indices) {
  cpu::RouterForward(logits, bias, spec, scores, weights, indices);
}
void CpuBackend::RouterBackward(ConstMatrixView scores, const int32_t* indices,
                                ConstMatrixView dweights,
                                const RouterSpec& spec, MatrixView dlogits) {
  cpu::RouterBackward(scores, indices, dweights, spec, dlogits);
}
double CpuBackend::CrossEntropyForward(ConstMatrixView logits,
                                       const int32_t* targets) {
  return cpu::CrossEntropyForward(logits, targets);
}
void CpuBackend::CrossEntropyBackward(ConstMatrixView logits,
                                      const int32_t* targets, float scale,
                                      MatrixView dlogits) {
  cpu::CrossEntropyBackward(logits, targets, scale, dlogits);
}
void CpuBackend::SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                                        ConstMatrixView v, const int32_t* keys,
                                        int64_t topk, int64_t heads,
                                        float scale, MatrixView out,
                                        MatrixView probs) {
  cpu::SparseAttentionForward(q, k, v, keys, topk, heads, scale, out, probs);
}
void CpuBackend::SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                                         ConstMatrixView v, const int32_t* keys,
                                         int64_t topk, int64_t heads,
                                         float scale, ConstMatrixView probs,
                                         ConstMatrixView dout, MatrixView dq,
                                         MatrixView dk, MatrixView dv) {
  cpu::SparseAttentionBackward(q, k, v, keys, topk, heads, scale, probs, dout,
                               dq, dk, dv);
}
void CpuBackend::IndexerTopK(ConstMatrixView iq, ConstMatrixView ik,
                             ConstMatrixView w, const int32_t* seq_start,
                             int64_t query_offset, int64_t topk, float scale,
                             int32_t* keys) {
  cpu::IndexerTopK(iq, ik, w, seq_start, query_offset, topk, scale, keys);
}
double CpuBackend::IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik,
                                 ConstMatrixView w, const int32_t* keys,
                                 int64_t topk, float scale,
                                 ConstMatrixView attn_probs, int64_t attn_heads,
                                 float coeff, MatrixView diq, MatrixView dik,
                                 MatrixView dw) {
  return cpu::IndexerKlLoss(iq, ik, w, keys, topk, scale, attn_probs,
                            attn_heads, coeff, diq, dik, dw);
}

double CpuBackend::SquaredSum(const std::vector<FlatSpan>& spans) {
  return cpu::SquaredSum(spans);
}

void CpuBackend::AdamWStep(const AdamWHyperparameters& hyper,
                           const std::vector<AdamWTensor>& tensors) {
  cpu::AdamWStep(hyper, tensors);
}

}  // namespace glm
