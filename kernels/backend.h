// The compute backend: every op the model needs, forward and backward.
//
// Model code talks only to this interface. Ops take strided views
// (kernels/tensor.h) of memory the backend can address; the CPU backend
// (kernels/cpu/) is the reference and a CUDA backend implements the same list.
//
// Conventions shared by all ops:
// - Backward ops ACCUMULATE (+=) into every gradient they are given, inputs
//   and weights alike, so a value used twice simply receives two calls.
// - An empty view (data == nullptr) as a gradient output means "not needed".
// - Index arrays use -1 for "no entry" (a query with fewer selectable keys
//   than k).
// - Views carry their element type (kernels/tensor.h). Every view is F32
//   except these, which may also be ActivationType(): the x of the products
//   (Linear, LinearBackward, GroupedLinear, GroupedLinearBackward,
//   LinearCrossEntropy), Linear's y when it does not accumulate and
//   GroupedLinear's y, LinearCrossEntropy's logits (a work buffer),
//   EmbeddingForward's table and out (out F32 needs an F32 table: the MoE
//   gathers its experts' input rows with it), SumRowGroups' x; the outputs
//   RmsNormForward's y, SwiGluForward's out, RopeForward's y, RepeatRows' y;
//   both sides of Copy (which converts); the attention's q, k, v and out
//   (SparseAttentionForward, SparseAttentionBackward; LatentAttentionForward's
//   and LatentAttentionBackward's q, kv and out) and
//   SparseAttentionKeyWeights' q and k; what reads the experts' products:
//   SwiGLU's gate and up (both directions), the combine's src (ScatterAddRows,
//   AddRowGroups and both their backwards). Gradients are F32, except those
//   only products, the combine or the attention read: the dy of
//   LinearBackward and of GroupedLinearBackward (read as it lies, not by
//   index) and the attention backwards' dout, which their producers may
//   write in ActivationType(): the combine backwards' dsrc, SwiGluBackward's
//   dgate and dup (its dout too), RopeBackward's dx (its dy too),
//   SparseAttentionBackward's dq, dk and dv (LatentAttentionBackward's dq and
//   dkv likewise), and LinearBackward's and
//   GroupedLinearBackward's dx when written (not accumulated: a
//   LinearBackward dx in ActivationType()). A backend refuses any other
//   element type with an error naming the op.
//
// A device backend owns the memory its ops read: allocator() is where the
// model allocates its activations and index arrays (kernels/device_memory.h),
// and every pointer an op receives lives there. The CPU backend works on host
// memory (allocator() is null).
#ifndef GLM_KERNELS_BACKEND_H_
#define GLM_KERNELS_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device_memory.h"
#include "kernels/kept_indexer_scores.h"
#include "kernels/tensor.h"

namespace glm {

// Sigmoid top-k routing with a selection-only bias (DeepSeek-V3 noaux_tc).
struct RouterSpec {
  int top_k = 1;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.f;
};

// One AdamW update (torch.optim.AdamW's formula, in double per element):
// g' = g * grad_scale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// w = (w - lr*wd*w) - lr/c1 * m / (sqrt(v)/sqrt(c2) + eps) with bias
// corrections c1 = 1 - b1^step, c2 = 1 - b2^step; wd only on tensors that
// take weight decay.
struct AdamWHyperparameters {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0;
  double grad_scale = 1;
  int64_t step = 1;
};

// A tensor the optimizer updates: its fp32 weights, gradient and moments,
// `size` elements each, in the backend's memory.
struct AdamWTensor {
  float* value = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  int64_t size = 0;
  bool weight_decay = true;
};

// Work a backend recorded once (Backend::Record) and runs again on demand:
// the same ops on the same memory, with whatever values that memory holds
// when Replay is called.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  // Queues the recorded ops (a device backend returns before they finish).
  virtual void Replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;
  // Where tensors for this backend's ops live; null: host memory.
  virtual Allocator* allocator() { return nullptr; }
  // The dtype the model keeps activations in whose only readers are the
  // products' x (see the conventions above): BF16 where products read bf16
  // operands (the CUDA bf16 mode), so that they are written once at half the
  // bytes instead of converted before each product; F32 elsewhere.
  virtual ElementType ActivationType() const { return ElementType::kF32; }
  // Returns once every op issued so far has finished. A device backend's ops
  // may return before their work is done; the CPU backend's never do.
  virtual void Synchronize() {}
  // Records the ops `work` issues without running them, for replays that
  // skip the host's per-op launch cost (a captured CUDA graph): run them
  // with Replay. Null, without calling `work`, where the backend does not
  // record (the CPU backend; one timing each op); an error, nothing
  // recorded and nothing run, when `work` fails or issues what cannot be
  // recorded (an op that waits for the device). What `work` does besides
  // issuing ops runs only now, so it may depend on nothing a replay would
  // change: host values are frozen into the recording, and only the
  // contents of memory that exists before and after it may differ between
  // replays. `work` may allocate only what it frees again.
  virtual absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      const std::function<absl::Status()>& work) {
    (void)work;
    return nullptr;
  }

  // ---- dense algebra ----
  // y = x w^T (+ y when accumulate). x [n, in], w [out, in], y [n, out].
  virtual void Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                      bool accumulate) = 0;
  // y = x w^T + addend, written: a residual stream's sum formed by the
  // product (its epilogue reads the addend) instead of a pass of its own.
  // addend and y F32, the same shape; addend may be y (Linear accumulating).
  virtual void LinearAdd(ConstMatrixView x, ConstMatrixView w,
                         ConstMatrixView addend, MatrixView y) = 0;
  // dx += dy w; dw += dy^T x. A dx in ActivationType() other than F32 is
  // written instead: dx = dy w, rounded once (nothing adds into a rounded
  // gradient). x's values are read only for dw: without dw, x may be any view
  // of its shape (dx itself: dy w as a product of its own, e.g. a query
  // taken through a key's up-projection).
  virtual void LinearBackward(ConstMatrixView x, ConstMatrixView w,
                              ConstMatrixView dy, MatrixView dx,
                              MatrixView dw) = 0;
  // y = x (shapes equal).
  virtual void Copy(ConstMatrixView x, MatrixView y) = 0;
  // y += alpha * x.
  virtual void Axpy(float alpha, ConstMatrixView x, MatrixView y) = 0;
  // y[r * repeats + i] = x[r] for i < repeats (a row shared by every head,
  // copied into each head's rows).
  virtual void RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y) = 0;
  // y[r] += x[r * repeats + i], added for i = 0, 1, ... in order (RepeatRows'
  // adjoint).
  virtual void SumRowGroups(ConstMatrixView x, int64_t repeats,
                            MatrixView y) = 0;

  // ---- rows ----
  // out[i] = table[ids[i]]. out has `n` rows.
  virtual void EmbeddingForward(ConstMatrixView table, const int32_t* ids,
                                MatrixView out) = 0;
  // dtable[ids[i]] += dout[i].
  virtual void EmbeddingBackward(ConstMatrixView dout, const int32_t* ids,
                                 MatrixView dtable) = 0;
  // out[rows[i]] += scale[i] * src[i] (scale may be null: 1).
  virtual void ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                              const float* scale, MatrixView out) = 0;
  // Backward of ScatterAddRows: dsrc[i] = scale[i] * dout[rows[i]];
  // dscale[j] = src[i] . dout[rows[i]] (a column view; empty: skipped) at
  // row j = dscale_rows[i] (distinct), or j = i where dscale_rows is null.
  // Written, not added: their callers' buffers start unfilled (the MoE's
  // routing-weight gradients land at their slots, so no scatter after).
  virtual void ScatterAddRowsBackward(ConstMatrixView src, const int32_t* rows,
                                      const float* scale, ConstMatrixView dout,
                                      MatrixView dsrc, MatrixView dscale,
                                      const int32_t* dscale_rows) = 0;

  // ---- normalization ----
  // y = x * rsqrt(mean(x^2) + eps) * w; rstd [rows] saved for backward. y
  // may be ActivationType(): the F32 value rounded to nearest even.
  virtual void RmsNormForward(ConstMatrixView x, const float* w, float eps,
                              MatrixView y, float* rstd) = 0;
  // dx += the input gradient, or, where `residual` is given (F32, dx's
  // shape), dx = residual + the input gradient, written (dx may start
  // unfilled): a residual branch's gradient joins in the same pass. dw +=
  // the weight gradient (skipped when null; dx skipped when empty).
  virtual void RmsNormBackward(ConstMatrixView x, const float* w,
                               const float* rstd, ConstMatrixView dy,
                               ConstMatrixView residual, MatrixView dx,
                               float* dw) = 0;
  // y = (x - mean) * rstd * w + b; mean, rstd [rows] saved.
  virtual void LayerNormForward(ConstMatrixView x, const float* w,
                                const float* b, float eps, MatrixView y,
                                float* mean, float* rstd) = 0;
  virtual void LayerNormBackward(ConstMatrixView x, const float* w,
                                 const float* mean, const float* rstd,
                                 ConstMatrixView dy, MatrixView dx, float* dw,
                                 float* db) = 0;

  // ---- activations ----
  // out = silu(gate) * up. gate, up and out may be ActivationType() (out
  // rounded to nearest even).
  virtual void SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                             MatrixView out) = 0;
  // dgate = dout * up * silu'(gate), dup = dout * silu(gate): written, not
  // added (their callers' buffers start unfilled); each skipped when empty.
  virtual void SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                              ConstMatrixView dout, MatrixView dgate,
                              MatrixView dup) = 0;

  // ---- rotary embedding, interleaved pairs in, half layout out ----
  // Row r uses position positions[r / rows_per_position]; x cols = rotary dim
  // R: y[:R/2] = x0 cos - x1 sin, y[R/2:] = x1 cos + x0 sin with (x0, x1) =
  // x[0::2], x[1::2], angle = pos / theta^(2i/R).
  virtual void RopeForward(ConstMatrixView x, const int32_t* positions,
                           int64_t rows_per_position, float theta,
                           MatrixView y) = 0;
  // The transpose rotation of dy into dx, written (not added).
  virtual void RopeBackward(ConstMatrixView dy, const int32_t* positions,
                            int64_t rows_per_position, float theta,
                            MatrixView dx) = 0;

  // ---- router ----
  // logits [n, E]; bias [E] for selection only. Writes scores = sigmoid(logits)
  // [n, E], weights [n, top_k] (unbiased scores of the chosen, normalized and
  // scaled) and indices [n * top_k].
  virtual void RouterForward(ConstMatrixView logits, const float* bias,
                             const RouterSpec& spec, MatrixView scores,
                             MatrixView weights, int32_t* indices) = 0;
  // dlogits += d(weights)/d(logits)^T dweights.
  virtual void RouterBackward(ConstMatrixView scores, const int32_t* indices,
                              ConstMatrixView dweights, const RouterSpec& spec,
                              MatrixView dlogits) = 0;

  // ---- routed experts, rows grouped by expert ----
  // A stable counting sort of `count` choices by expert: choice i (expert[i],
  // in [0, experts)) lands at position p of its expert's range, positions in
  // ascending i within an expert; slots[p] = i, tokens[p] = i / per_token;
  // offsets [experts + 1]: expert e owns positions [offsets[e],
  // offsets[e+1]). Every array is in the backend's memory.
  virtual void GroupByExpert(const int32_t* expert, int64_t count,
                             int64_t per_token, int64_t experts, int32_t* slots,
                             int32_t* tokens, int32_t* offsets) = 0;
  // Each token's positions in a GroupByExpert grouping of every one of its
  // per_token choices (slots a permutation of [0, count)):
  // token_rows[t * per_token + j] is the j-th smallest p with
  // slots[p] / per_token == t. A layer's combine and its gradient's then add
  // rows by AddRowGroups, sorting nothing.
  virtual void TokenRows(const int32_t* slots, int64_t count, int64_t per_token,
                         int32_t* token_rows) = 0;
  // out[r] += scale[i] * src[i] for i = sources[r * per_row + j], j in order
  // (scale null: 1); src.rows = out.rows * per_row. With TokenRows' sources:
  // ScatterAddRows' sums, added in the same order.
  virtual void AddRowGroups(ConstMatrixView src, const int32_t* sources,
                            int64_t per_row, const float* scale,
                            MatrixView out) = 0;
  // Backward of AddRowGroups: ScatterAddRowsBackward's dsrc and dscale with
  // rows[i] = r for i = sources[r * per_row + j] (dout.rows output rows);
  // written, not added. A token's dout row is read once for all its rows.
  virtual void AddRowGroupsBackward(ConstMatrixView src, const int32_t* sources,
                                    int64_t per_row, const float* scale,
                                    ConstMatrixView dout, MatrixView dsrc,
                                    MatrixView dscale,
                                    const int32_t* dscale_rows) = 0;
  // loads[e] += offsets[e+1] - offsets[e] for e < experts (the tokens a
  // GroupByExpert gave each expert, summed over a step's micro batches).
  virtual void AddExpertLoads(const int32_t* offsets, int64_t experts,
                              int32_t* loads) = 0;
  // y[p] = x[p] w_e^T for every row p of expert e (offsets as above, rows =
  // offsets[experts] = y.rows = x.count); w [experts * out, in]: expert e's
  // weight is rows [e*out, (e+1)*out). x may be read by index (IndexedRows):
  // the routed tokens straight from the layer's input, without a gathered
  // copy. y [rows, out] is overwritten (in ActivationType(): rounded to
  // nearest even from the fp32 sums).
  virtual void GroupedLinear(IndexedRows x, ConstMatrixView w,
                             const int32_t* offsets, int64_t experts,
                             MatrixView y) = 0;
  // dx[p] += dy[p] w_e (dx[p] = without accumulate_dx: dx need not be
  // initialized); dw_e += dy_e^T x_e (an expert without rows adds nothing).
  // x and dy may be read by index (dy: the combine's gradient, each routed
  // row's token's output gradient times its routing weight); both have
  // offsets[experts] rows, as dx [rows, in].
  virtual void GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                                     const int32_t* offsets, int64_t experts,
                                     IndexedRows dy, MatrixView dx,
                                     bool accumulate_dx, MatrixView dw) = 0;

  // ---- loss ----
  // The loss ops add their value to a double in the backend's memory (*sum,
  // device memory on a device backend) and read nothing back: the caller
  // reads its sums once the whole forward is queued, not after every op.
  //
  // *sum += (sum over rows with targets[r] >= 0 of -log
  // softmax(logits[r])[targets[r]]) / divisor.
  virtual void CrossEntropyForward(ConstMatrixView logits,
                                   const int32_t* targets, double divisor,
                                   double* sum) = 0;
  // dlogits += scale * (softmax(logits[r]) - onehot(targets[r])) on counted
  // rows.
  virtual void CrossEntropyBackward(ConstMatrixView logits,
                                    const int32_t* targets, float scale,
                                    MatrixView dlogits) = 0;
  // A chunk of an output head's loss and gradient, for a forward followed at
  // once by its backward: logits = x w^T into `logits` (the caller's work
  // buffer, [x.rows, w.rows]), *sum += their CrossEntropyForward (divisor),
  // then dx += dlogits w and dw += dlogits^T x for dlogits =
  // CrossEntropyBackward's (scale). dlogits is not kept: a device backend forms
  // it in its compute precision only. Logits in the activation type are
  // rounded to it as the product writes them (as transformers' bf16 logits),
  // and their buffer takes dlogits in place. On return `logits` holds no
  // defined values.
  virtual void LinearCrossEntropy(ConstMatrixView x, ConstMatrixView w,
                                  const int32_t* targets, double divisor,
                                  float scale, MatrixView logits, double* sum,
                                  MatrixView dx, MatrixView dw) = 0;

  // ---- sparse attention (MLA over DSA-selected keys) ----
  // Rows are token-major, head-minor: q [nq*heads, dqk] for nq queries, k
  // [nk*heads, dqk] and v [nk*heads, dv] for nk key tokens (the same tokens,
  // or under context parallelism every rank's). keys [nq, topk]: key token
  // indices each query attends, -1 = none. out [nq*heads, dv]; lse
  // [nq*heads]: the log-sum-exp of each row's scaled scores over its selected
  // keys, which is all the backward keeps (probabilities are recomputed from
  // it, never saved). A query with no key gets zeros and lse -inf. When nq ==
  // nk, query t is key token t and selects keys <= t (the indexer's causal
  // order): backends may skip the pairs after the diagonal. A query's keys
  // are distinct. full_queries (0 unless nq == nk): the caller's promise that
  // each query t < full_queries selects every key <= t (the first top-k
  // queries of a sequence starting at token 0), which backends may attend as
  // plain causal attention without the selection.
  virtual void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                                      ConstMatrixView v, const int32_t* keys,
                                      int64_t topk, int64_t full_queries,
                                      int64_t heads, float scale,
                                      MatrixView out, float* lse) = 0;
  // out and lse as the forward wrote them. Writes dq, dk and dv (not added;
  // an empty view is not computed), and key_weights [nq, topk] (F32) when
  // given: what SparseAttentionKeyWeights writes for these operands, from
  // the probabilities the backward forms anyway (a backend that holds them
  // in the activation type sums them as they are rounded there).
  virtual void SparseAttentionBackward(
      ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
      const int32_t* keys, int64_t topk, int64_t full_queries, int64_t heads,
      float scale, ConstMatrixView out, const float* lse, ConstMatrixView dout,
      MatrixView dq, MatrixView dk, MatrixView dv, MatrixView key_weights) = 0;
  // The attention each selected key receives, summed over heads (the
  // indexer's KL target): weights[t, j] = sum_h exp(scale q[t*heads+h] .
  // k[keys[t,j]*heads+h] - lse[t*heads+h]), 0 on -1 slots. weights [nq, topk].
  virtual void SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                                         const int32_t* keys, int64_t topk,
                                         int64_t heads, float scale,
                                         const float* lse,
                                         MatrixView weights) = 0;

  // ---- latent attention (MLA with its key and value projections absorbed)
  // ---- SparseAttentionForward's attention with every head reading one shared
  // row per key token: q [nq*heads, d] (each head's query taken into the
  // latent space), kv [nk, d]: key token s's latent row, every head's key;
  // its first out.cols columns are every head's value. keys, topk, scale,
  // out [nq*heads, dv] and lse as SparseAttentionForward's (no full_queries:
  // callers give it the queries past the dense part). A gathered row serves
  // every head, so at long context it moves a fraction of the per-head
  // form's bytes.
  virtual void LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                                      const int32_t* keys, int64_t topk,
                                      int64_t heads, float scale,
                                      MatrixView out, float* lse) = 0;
  // out and lse as the forward wrote them. Writes dq [nq*heads, d] and dkv
  // [nk, d] (not added; an empty view is not computed): the keys' and the
  // values' gradients summed in the shared rows. key_weights [nq, topk] (F32)
  // when given, as SparseAttentionBackward's.
  virtual void LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                                       const int32_t* keys, int64_t topk,
                                       int64_t heads, float scale,
                                       ConstMatrixView out, const float* lse,
                                       ConstMatrixView dout, MatrixView dq,
                                       MatrixView dkv,
                                       MatrixView key_weights) = 0;

  // ---- DSA indexer ----
  // iq [nq*heads, d], ik [nk, d], w [nq, heads]; query t is key token
  // g = query_offset + t (0 when queries and keys are the same tokens).
  // score[t, s] = sum_h w[t,h] * relu(scale * iq[t,h] . ik[s]) over keys s in
  // [seq_start[t], g]. Writes the min(topk, g - seq_start[t] + 1) best keys
  // per query, best first (ties: lower index first), -1 after them. keys
  // [nq, topk]. A backend whose scores are approximate (the CUDA bf16 mode)
  // may list each query's selection in key order instead, and take every key
  // of a query that sees no more than topk without scoring them: only the set
  // matters downstream, up to the rounding of sums over slots.
  // keep (null: nothing kept): where a backend that scores the loss's pairs
  // as it scores the selection's (the CUDA bf16 mode) may keep this call's
  // scores for an IndexerKlLoss over these same iq, ik and w (any selection
  // of these keys, none of the operands changed in between), instead of
  // scoring them twice; the caller holds it until that loss.
  virtual void IndexerTopK(ConstMatrixView iq, ConstMatrixView ik,
                           ConstMatrixView w, const int32_t* seq_start,
                           int64_t query_offset, int64_t topk, float scale,
                           KeptIndexerScores* keep, int32_t* keys) = 0;
  // KL(target || softmax(index scores over the selected keys)), averaged over
  // the nq queries (w's rows) and times coeff; keys index ik's nk rows.
  // target [nq, topk]: the attention each selected key receives
  // (SparseAttentionKeyWeights), L1-normalized here. Adds the loss to *sum
  // (as CrossEntropyForward); accumulates coeff-scaled gradients into diq,
  // dik, dw. With as many queries as keys (nq == nk, self-attention on one
  // rank) query t is key token t and its keys are tokens <= t. kept: what an
  // IndexerTopK kept (or null); read only when it scored these operands.
  virtual void IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik,
                             ConstMatrixView w, const int32_t* keys,
                             int64_t topk, float scale, ConstMatrixView target,
                             float coeff, const KeptIndexerScores* kept,
                             MatrixView diq, MatrixView dik, MatrixView dw,
                             double* sum) = 0;

  // ---- weights ----
  // The weights products read (matrices and stacked experts, where the
  // backend computes): a backend whose products round their inputs (the CUDA
  // bf16 mode) makes a rounded copy of each span here and reads it for every
  // product operand inside one. Call it after the weights change other than
  // by AdamWStep (a load, a LoRA merge, an update on another backend) and
  // before the next product; spans unlike the last call's replace them.
  // Backends computing in fp32 keep no copies.
  virtual void RefreshComputeCopies(
      const std::vector<ConstFloatSpan>& weights) = 0;

  // ---- optimizer ----
  // Sum of x^2 over every element of the spans, in double, in a fixed order
  // (the gradient norm).
  virtual double SquaredSum(const std::vector<ConstFloatSpan>& spans) = 0;
  // One AdamW update of every tensor (one pass over all of them). A backend
  // that keeps compute copies also writes, in the same pass, the copy of
  // each tensor whose values lie inside a copied span, bitwise as
  // RefreshComputeCopies would: its steps keep the copies current.
  virtual void AdamWStep(const AdamWHyperparameters& hyper,
                         const std::vector<AdamWTensor>& tensors) = 0;
};

// A buffer for an input gradient that LinearBackward produces and only
// products or elementwise ops read: in the activation type, which
// LinearBackward writes (left unfilled); where that is F32, a zeroed one it
// adds into.
inline Tensor WrittenInputGradient(const Backend& backend,
                                   std::vector<int64_t> shape) {
  const ElementType type = backend.ActivationType();
  return type == ElementType::kF32 ? Tensor(std::move(shape))
                                   : Tensor::ForOutput(std::move(shape), type);
}

}  // namespace glm

#endif  // GLM_KERNELS_BACKEND_H_
