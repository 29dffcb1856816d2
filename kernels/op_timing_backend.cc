#include "kernels/op_timing_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace glm {
namespace {

std::string Shape(ConstMatrixView m) {
  return absl::StrCat("[", m.rows, ",", m.cols, "]");
}

// 2 FLOPs per multiply-add of a [rows, inner] x [inner, out] product.
double ProductFlops(int64_t rows, int64_t inner, int64_t out) {
  return 2.0 * rows * inner * out;
}

// The fp32 bytes of a view's elements: what reading or writing it once moves.
double Bytes(ConstMatrixView m) { return 4.0 * m.rows * m.cols; }

// The fp32 bytes of `spans`.
double Bytes(const std::vector<ConstFloatSpan>& spans) {
  double bytes = 0;
  for (const ConstFloatSpan& span : spans) bytes += 4.0 * span.size;
  return bytes;
}

// An accumulation into rows of `out` from the rows of `src`: src read, and
// each destination row (at most one per source) read and written.
double ScatterAddBytes(ConstMatrixView src, ConstMatrixView out) {
  return Bytes(src) +
         2 * Bytes({nullptr, std::min(src.rows, out.rows), out.cols, out.cols});
}

// A combine's backward: dout read at each source row (from cache after the
// first), dsrc written and src read for dscale where wanted.
double CombineBackwardBytes(ConstMatrixView src, ConstMatrixView dsrc,
                            ConstMatrixView dscale) {
  return Bytes(src) * (1 + (dsrc.empty() ? 0 : 2) + (dscale.empty() ? 0 : 1));
}

OpCost Flops(double flops) { return {flops, 0}; }
// The fewest bytes a memory-bound op moves: each operand read or written once
// (an accumulated output both).
OpCost Moves(double bytes) { return {0, bytes}; }

OpTimingBackend::OpHook& TheOpHook() {
  static auto* hook = new OpTimingBackend::OpHook;
  return *hook;
}

// The attention's products over `topk` slots of every query row (q
// [rows, dqk], values dv wide), either form. Forward: the scores (q.k) and
// the weighted sum (p.v). Backward: twice the forward's products (dq, dk from
// dscores; dv, dprobs from dout) and the recomputed scores.
double AttentionForwardFlops(ConstMatrixView q, int64_t topk, int64_t dv) {
  return 2.0 * q.rows * topk * (q.cols + dv);
}
double AttentionBackwardFlops(ConstMatrixView q, int64_t topk, int64_t dv) {
  return 2.0 * q.rows * topk * (3 * q.cols + 2 * dv);
}

}  // namespace

void OpTimingBackend::SetOpHook(OpHook hook) { TheOpHook() = std::move(hook); }

OpTimingBackend::OpTimingBackend(std::unique_ptr<Backend> timed,
                                 std::ostream* report)
    : timed_(std::move(timed)), report_(report) {}

OpTimingBackend::~OpTimingBackend() {
  if (report_ != nullptr) WriteReport(*report_);
}

template <typename Op>
auto OpTimingBackend::Timed(const std::string& name, OpCost cost, Op op) {
  // Work issued before this op (by whoever holds the backend) is not its.
  timed_->Synchronize();
  const Clock::time_point start = Clock::now();
  if (!started_) {
    started_ = true;
    first_op_ = start;
  }
  if (TheOpHook()) TheOpHook()(&name);
  struct Record {
    OpTimingBackend* self;
    const std::string& name;
    OpCost cost;
    Clock::time_point start;
    ~Record() {
      self->timed_->Synchronize();
      if (TheOpHook()) TheOpHook()(nullptr);
      Group& group = self->groups_[name];
      const double seconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (group.calls == 0) group.first_seconds = seconds;
      ++group.calls;
      group.seconds += seconds;
      group.flops += cost.flops;
      group.bytes += cost.bytes;
    }
  } record{this, name, cost, start};
  return op();
}

void OpTimingBackend::WriteReport(std::ostream& out) const {
  if (!started_) return;
  const double wall =
      std::chrono::duration<double>(Clock::now() - first_op_).count();
  std::vector<std::pair<std::string, Group>> sorted(groups_.begin(),
                                                    groups_.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  double in_ops = 0;
  // Per call and rate over the calls after the first, which pays for plans,
  // caches and workspaces (cuDNN builds its kernels then).
  out << "op times over " << absl::StrFormat("%.3f", wall)
      << " s since the first op (each op synchronized)\n"
      << "| op group | calls | total ms | first call ms | ms per later call "
         "| share | TFLOP/s | GB/s |\n"
      << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& [name, group] : sorted) {
    in_ops += group.seconds;
    const bool later = group.calls > 1;
    const double steady_seconds =
        later ? group.seconds - group.first_seconds : group.seconds;
    const double steady_calls = later ? group.calls - 1 : 1;
    const double steady_share = steady_calls / static_cast<double>(group.calls);
    auto rate = [&](double total, double unit) {
      return total > 0 && steady_seconds > 0
                 ? absl::StrFormat("%.1f",
                                   total * steady_share / steady_seconds / unit)
                 : std::string();
    };
    out << absl::StrFormat(
        "| %s | %d | %.1f | %.3f | %s | %.1f%% | %s | %s |\n", name,
        group.calls, 1e3 * group.seconds, 1e3 * group.first_seconds,
        later ? absl::StrFormat("%.3f", 1e3 * steady_seconds / steady_calls)
              : "",
        100 * group.seconds / wall, rate(group.flops, 1e12),
        rate(group.bytes, 1e9));
  }
  out << absl::StrFormat("| outside ops | | %.1f | | | %.1f%% | | |\n",
                         1e3 * (wall - in_ops), 100 * (wall - in_ops) / wall);
  out.flush();
}

void OpTimingBackend::Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                             bool accumulate) {
  Timed("Linear w" + Shape(w), Flops(ProductFlops(x.rows, w.cols, w.rows)),
        [&] { timed_->Linear(x, w, y, accumulate); });
}

void OpTimingBackend::LinearAdd(ConstMatrixView x, ConstMatrixView w,
                                ConstMatrixView addend, MatrixView y) {
  Timed("LinearAdd w" + Shape(w), Flops(ProductFlops(x.rows, w.cols, w.rows)),
        [&] { timed_->LinearAdd(x, w, addend, y); });
}

void OpTimingBackend::LinearBackward(ConstMatrixView x, ConstMatrixView w,
                                     ConstMatrixView dy, MatrixView dx,
                                     MatrixView dw) {
  const double one = ProductFlops(x.rows, w.cols, w.rows);
  Timed("LinearBackward w" + Shape(w),
        Flops((dx.empty() ? 0 : one) + (dw.empty() ? 0 : one)),
        [&] { timed_->LinearBackward(x, w, dy, dx, dw); });
}

void OpTimingBackend::Copy(ConstMatrixView x, MatrixView y) {
  Timed("Copy", Moves(2 * Bytes(x)), [&] { timed_->Copy(x, y); });
}

void OpTimingBackend::Axpy(float alpha, ConstMatrixView x, MatrixView y) {
  Timed("Axpy", Moves(3 * Bytes(x)), [&] { timed_->Axpy(alpha, x, y); });
}

void OpTimingBackend::RepeatRows(ConstMatrixView x, int64_t repeats,
                                 MatrixView y) {
  Timed("RepeatRows", Moves(Bytes(x) + Bytes(y)),
        [&] { timed_->RepeatRows(x, repeats, y); });
}

void OpTimingBackend::SumRowGroups(ConstMatrixView x, int64_t repeats,
                                   MatrixView y) {
  Timed("SumRowGroups", Moves(Bytes(x) + 2 * Bytes(y)),
        [&] { timed_->SumRowGroups(x, repeats, y); });
}

void OpTimingBackend::EmbeddingForward(ConstMatrixView table,
                                       const int32_t* ids, MatrixView out) {
  Timed("EmbeddingForward", Moves(2 * Bytes(out)),
        [&] { timed_->EmbeddingForward(table, ids, out); });
}

void OpTimingBackend::EmbeddingBackward(ConstMatrixView dout,
                                        const int32_t* ids, MatrixView dtable) {
  Timed("EmbeddingBackward", Moves(ScatterAddBytes(dout, dtable)),
        [&] { timed_->EmbeddingBackward(dout, ids, dtable); });
}

void OpTimingBackend::ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                                     const float* scale, MatrixView out) {
  Timed("ScatterAddRows", Moves(ScatterAddBytes(src, out)),
        [&] { timed_->ScatterAddRows(src, rows, scale, out); });
}

void OpTimingBackend::ScatterAddRowsBackward(ConstMatrixView src,
                                             const int32_t* rows,
                                             const float* scale,
                                             ConstMatrixView dout,
                                             MatrixView dsrc, MatrixView dscale,
                                             const int32_t* dscale_rows) {
  Timed("ScatterAddRowsBackward",
        Moves(CombineBackwardBytes(src, dsrc, dscale)), [&] {
          timed_->ScatterAddRowsBackward(src, rows, scale, dout, dsrc, dscale,
                                         dscale_rows);
        });
}

void OpTimingBackend::RmsNormForward(ConstMatrixView x, const float* w,
                                     float eps, MatrixView y, float* rstd) {
  Timed("RmsNormForward", Moves(2 * Bytes(x)),
        [&] { timed_->RmsNormForward(x, w, eps, y, rstd); });
}

void OpTimingBackend::RmsNormBackward(ConstMatrixView x, const float* w,
                                      const float* rstd, ConstMatrixView dy,
                                      ConstMatrixView residual, MatrixView dx,
                                      float* dw) {
  // x and dy read; dx read and written, or residual read and dx written.
  Timed("RmsNormBackward", Moves(2 * Bytes(x) + 2 * Bytes(dx)),
        [&] { timed_->RmsNormBackward(x, w, rstd, dy, residual, dx, dw); });
}

void OpTimingBackend::LayerNormForward(ConstMatrixView x, const float* w,
                                       const float* b, float eps, MatrixView y,
                                       float* mean, float* rstd) {
  Timed("LayerNormForward", Moves(2 * Bytes(x)),
        [&] { timed_->LayerNormForward(x, w, b, eps, y, mean, rstd); });
}

void OpTimingBackend::LayerNormBackward(ConstMatrixView x, const float* w,
                                        const float* mean, const float* rstd,
                                        ConstMatrixView dy, MatrixView dx,
                                        float* dw, float* db) {
  Timed("LayerNormBackward", Moves(2 * Bytes(x) + 2 * Bytes(dx)),
        [&] { timed_->LayerNormBackward(x, w, mean, rstd, dy, dx, dw, db); });
}

void OpTimingBackend::SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                                    MatrixView out) {
  Timed("SwiGluForward", Moves(3 * Bytes(out)),
        [&] { timed_->SwiGluForward(gate, up, out); });
}

void OpTimingBackend::SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                                     ConstMatrixView dout, MatrixView dgate,
                                     MatrixView dup) {
  Timed("SwiGluBackward",
        Moves(3 * Bytes(dout) + 2 * Bytes(dgate) + 2 * Bytes(dup)),
        [&] { timed_->SwiGluBackward(gate, up, dout, dgate, dup); });
}

void OpTimingBackend::RopeForward(ConstMatrixView x, const int32_t* positions,
                                  int64_t rows_per_position, float theta,
                                  MatrixView y) {
  Timed("RopeForward", Moves(2 * Bytes(x)), [&] {
    timed_->RopeForward(x, positions, rows_per_position, theta, y);
  });
}

void OpTimingBackend::RopeBackward(ConstMatrixView dy, const int32_t* positions,
                                   int64_t rows_per_position, float theta,
                                   MatrixView dx) {
  Timed("RopeBackward", Moves(2 * Bytes(dy)), [&] {
    timed_->RopeBackward(dy, positions, rows_per_position, theta, dx);
  });
}

void OpTimingBackend::RouterForward(ConstMatrixView logits, const float* bias,
                                    const RouterSpec& spec, MatrixView scores,
                                    MatrixView weights, int32_t* indices) {
  Timed("RouterForward", Moves(2 * Bytes(logits)), [&] {
    timed_->RouterForward(logits, bias, spec, scores, weights, indices);
  });
}

void OpTimingBackend::RouterBackward(ConstMatrixView scores,
                                     const int32_t* indices,
                                     ConstMatrixView dweights,
                                     const RouterSpec& spec,
                                     MatrixView dlogits) {
  Timed("RouterBackward", Moves(2 * Bytes(scores)), [&] {
    timed_->RouterBackward(scores, indices, dweights, spec, dlogits);
  });
}

void OpTimingBackend::GroupByExpert(const int32_t* expert, int64_t count,
                                    int64_t per_token, int64_t experts,
                                    int32_t* slots, int32_t* tokens,
                                    int32_t* offsets) {
  Timed("GroupByExpert", OpCost{}, [&] {
    timed_->GroupByExpert(expert, count, per_token, experts, slots, tokens,
                          offsets);
  });
}

void OpTimingBackend::TokenRows(const int32_t* slots, int64_t count,
                                int64_t per_token, int32_t* token_rows) {
  Timed("TokenRows", OpCost{},
        [&] { timed_->TokenRows(slots, count, per_token, token_rows); });
}

void OpTimingBackend::AddRowGroups(ConstMatrixView src, const int32_t* sources,
                                   int64_t per_row, const float* scale,
                                   MatrixView out) {
  Timed("AddRowGroups", Moves(ScatterAddBytes(src, out)),
        [&] { timed_->AddRowGroups(src, sources, per_row, scale, out); });
}

void OpTimingBackend::AddRowGroupsBackward(ConstMatrixView src,
                                           const int32_t* sources,
                                           int64_t per_row, const float* scale,
                                           ConstMatrixView dout,
                                           MatrixView dsrc, MatrixView dscale,
                                           const int32_t* dscale_rows) {
  Timed("AddRowGroupsBackward", Moves(CombineBackwardBytes(src, dsrc, dscale)),
        [&] {
          timed_->AddRowGroupsBackward(src, sources, per_row, scale, dout, dsrc,
                                       dscale, dscale_rows);
        });
}

void OpTimingBackend::AddExpertLoads(const int32_t* offsets, int64_t experts,
                                     int32_t* loads) {
  Timed("AddExpertLoads", OpCost{},
        [&] { timed_->AddExpertLoads(offsets, experts, loads); });
}

void OpTimingBackend::GroupedLinear(IndexedRows x, ConstMatrixView w,
                                    const int32_t* offsets, int64_t experts,
                                    MatrixView y) {
  Timed(absl::StrCat("GroupedLinear w[", w.rows, ",", w.cols, "]"),
        Flops(ProductFlops(y.rows, x.x.cols, w.rows / experts)),
        [&] { timed_->GroupedLinear(x, w, offsets, experts, y); });
}

void OpTimingBackend::GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                                            const int32_t* offsets,
                                            int64_t experts, IndexedRows dy,
                                            MatrixView dx, bool accumulate_dx,
                                            MatrixView dw) {
  const double products = (dx.empty() ? 0 : 1) + (dw.empty() ? 0 : 1);
  Timed(absl::StrCat("GroupedLinearBackward w[", w.rows, ",", w.cols, "]"),
        Flops(products * ProductFlops(dy.count, x.x.cols, w.rows / experts)),
        [&] {
          timed_->GroupedLinearBackward(x, w, offsets, experts, dy, dx,
                                        accumulate_dx, dw);
        });
}

void OpTimingBackend::CrossEntropyForward(ConstMatrixView logits,
                                          const int32_t* targets,
                                          double divisor, double* sum) {
  Timed("CrossEntropyForward", Moves(Bytes(logits)),
        [&] { timed_->CrossEntropyForward(logits, targets, divisor, sum); });
}

void OpTimingBackend::CrossEntropyBackward(ConstMatrixView logits,
                                           const int32_t* targets, float scale,
                                           MatrixView dlogits) {
  Timed("CrossEntropyBackward", Moves(Bytes(logits) + 2 * Bytes(dlogits)),
        [&] { timed_->CrossEntropyBackward(logits, targets, scale, dlogits); });
}

// Counted as its three products; the loss passes over the logits ride along.
void OpTimingBackend::LinearCrossEntropy(ConstMatrixView x, ConstMatrixView w,
                                         const int32_t* targets, double divisor,
                                         float scale, MatrixView logits,
                                         double* sum, MatrixView dx,
                                         MatrixView dw) {
  const double one = ProductFlops(x.rows, w.cols, w.rows);
  Timed("LinearCrossEntropy w" + Shape(w),
        Flops(one * (1 + (dx.empty() ? 0 : 1) + (dw.empty() ? 0 : 1))), [&] {
          timed_->LinearCrossEntropy(x, w, targets, divisor, scale, logits, sum,
                                     dx, dw);
        });
}

void OpTimingBackend::SparseAttentionForward(
    ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
    float scale, MatrixView out, float* lse) {
  const double flops = AttentionForwardFlops(q, topk, v.cols);
  Timed(absl::StrCat("SparseAttentionForward topk ", topk), Flops(flops), [&] {
    timed_->SparseAttentionForward(q, k, v, keys, topk, full_queries, heads,
                                   scale, out, lse);
  });
}

void OpTimingBackend::SparseAttentionBackward(
    ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
    const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
    float scale, ConstMatrixView out, const float* lse, ConstMatrixView dout,
    MatrixView dq, MatrixView dk, MatrixView dv, MatrixView key_weights) {
  const double flops = AttentionBackwardFlops(q, topk, v.cols);
  Timed(absl::StrCat("SparseAttentionBackward topk ", topk,
                     key_weights.empty() ? "" : " with key weights"),
        Flops(flops), [&] {
          timed_->SparseAttentionBackward(q, k, v, keys, topk, full_queries,
                                          heads, scale, out, lse, dout, dq, dk,
                                          dv, key_weights);
        });
}

// The selected scores of every head.
void OpTimingBackend::SparseAttentionKeyWeights(
    ConstMatrixView q, ConstMatrixView k, const int32_t* keys, int64_t topk,
    int64_t heads, float scale, const float* lse, MatrixView weights) {
  Timed("SparseAttentionKeyWeights", Flops(2.0 * q.rows * topk * q.cols), [&] {
    timed_->SparseAttentionKeyWeights(q, k, keys, topk, heads, scale, lse,
                                      weights);
  });
}

// The same products as the per-head form's, every head reading the shared
// rows.
void OpTimingBackend::LatentAttentionForward(ConstMatrixView q,
                                             ConstMatrixView kv,
                                             const int32_t* keys, int64_t topk,
                                             int64_t heads, float scale,
                                             MatrixView out, float* lse) {
  const double flops = AttentionForwardFlops(q, topk, out.cols);
  Timed(absl::StrCat("LatentAttentionForward topk ", topk), Flops(flops), [&] {
    timed_->LatentAttentionForward(q, kv, keys, topk, heads, scale, out, lse);
  });
}

void OpTimingBackend::LatentAttentionBackward(
    ConstMatrixView q, ConstMatrixView kv, const int32_t* keys, int64_t topk,
    int64_t heads, float scale, ConstMatrixView out, const float* lse,
    ConstMatrixView dout, MatrixView dq, MatrixView dkv,
    MatrixView key_weights) {
  const double flops = AttentionBackwardFlops(q, topk, out.cols);
  Timed(absl::StrCat("LatentAttentionBackward topk ", topk,
                     key_weights.empty() ? "" : " with key weights"),
        Flops(flops), [&] {
          timed_->LatentAttentionBackward(q, kv, keys, topk, heads, scale, out,
                                          lse, dout, dq, dkv, key_weights);
        });
}

// Every query head against every key: an upper bound (causal keys are about
// half of them).
void OpTimingBackend::IndexerTopK(ConstMatrixView iq, ConstMatrixView ik,
                                  ConstMatrixView w, const int32_t* seq_start,
                                  int64_t query_offset, int64_t topk,
                                  float scale, KeptIndexerScores* keep,
                                  int32_t* keys) {
  Timed("IndexerTopK (FLOPs: all keys)",
        Flops(ProductFlops(iq.rows, iq.cols, ik.rows)), [&] {
          timed_->IndexerTopK(iq, ik, w, seq_start, query_offset, topk, scale,
                              keep, keys);
        });
}

void OpTimingBackend::IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik,
                                    ConstMatrixView w, const int32_t* keys,
                                    int64_t topk, float scale,
                                    ConstMatrixView target, float coeff,
                                    const KeptIndexerScores* kept,
                                    MatrixView diq, MatrixView dik,
                                    MatrixView dw, double* sum) {
  Timed("IndexerKlLoss", Flops(3 * ProductFlops(iq.rows, iq.cols, topk)), [&] {
    timed_->IndexerKlLoss(iq, ik, w, keys, topk, scale, target, coeff, kept,
                          diq, dik, dw, sum);
  });
}

void OpTimingBackend::RefreshComputeCopies(
    const std::vector<ConstFloatSpan>& weights) {
  Timed("RefreshComputeCopies", Moves(1.5 * Bytes(weights)),
        [&] { timed_->RefreshComputeCopies(weights); });
}

double OpTimingBackend::SquaredSum(const std::vector<ConstFloatSpan>& spans) {
  return Timed("SquaredSum", Moves(Bytes(spans)),
               [&] { return timed_->SquaredSum(spans); });
}

void OpTimingBackend::AdamWStep(const AdamWHyperparameters& hyper,
                                const std::vector<AdamWTensor>& tensors) {
  // Weights, gradients and both moments read; weights and moments written.
  double elements = 0;
  for (const AdamWTensor& t : tensors) elements += t.size;
  Timed("AdamWStep", Moves(28 * elements),
        [&] { timed_->AdamWStep(hyper, tensors); });
}

}  // namespace glm
