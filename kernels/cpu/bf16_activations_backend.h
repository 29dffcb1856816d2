// The CPU backend with the CUDA bf16 mode's storage and products:
// ActivationType() is BF16, so the model keeps in bf16 the activations that
// only products, the attention and the experts' combine read
// (kernels/backend.h lists them); every op here widens those operands,
// computes on the CPU backend in fp32, and rounds what it writes back to bf16
// (to nearest even, as a GPU's conversion does); and the matrix products read
// every operand (x, w, dy) rounded to bf16, accumulating in fp32, as that
// mode's do. Nothing else is converted: an operand in bf16 where
// kernels/backend.h does not allow it reaches the CPU backend, which refuses
// it naming the op, as the CUDA backend would.
//
// For tests, on machines without a GPU, of the code that runs only in the
// bf16 mode: views and exchanges of bf16 tensors in the model and the
// parallel layers. Its numbers are close to the CUDA backend's, not equal:
// other orders of sums, fp32 attention and indexer arithmetic.
#ifndef GLM_KERNELS_CPU_BF16_ACTIVATIONS_BACKEND_H_
#define GLM_KERNELS_CPU_BF16_ACTIVATIONS_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {

class Bf16ActivationsCpuBackend : public Backend {
 public:
  std::string Name() const override { return "cpu (bf16 activations)"; }
  ElementType ActivationType() const override { return ElementType::kBF16; }

  void Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
              bool accumulate) override;
  void LinearAdd(ConstMatrixView x, ConstMatrixView w, ConstMatrixView addend,
                 MatrixView y) override;
  void LinearBackward(ConstMatrixView x, ConstMatrixView w, ConstMatrixView dy,
                      MatrixView dx, MatrixView dw) override;
  void Copy(ConstMatrixView x, MatrixView y) override;
  void Axpy(float alpha, ConstMatrixView x, MatrixView y) override;
  void RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y) override;
  void SumRowGroups(ConstMatrixView x, int64_t repeats, MatrixView y) override;
  void EmbeddingForward(ConstMatrixView table, const int32_t* ids,
                        MatrixView out) override;
  void EmbeddingBackward(ConstMatrixView dout, const int32_t* ids,
                         MatrixView dtable) override;
  void ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                      const float* scale, MatrixView out) override;
  void ScatterAddRowsBackward(ConstMatrixView src, const int32_t* rows,
                              const float* scale, ConstMatrixView dout,
                              MatrixView dsrc, MatrixView dscale,
                              const int32_t* dscale_rows) override;
  void RmsNormForward(ConstMatrixView x, const float* w, float eps,
                      MatrixView y, float* rstd) override;
  void RmsNormBackward(ConstMatrixView x, const float* w, const float* rstd,
                       ConstMatrixView dy, ConstMatrixView residual,
                       MatrixView dx, float* dw) override;
  void LayerNormForward(ConstMatrixView x, const float* w, const float* b,
                        float eps, MatrixView y, float* mean,
                        float* rstd) override;
  void LayerNormBackward(ConstMatrixView x, const float* w, const float* mean,
                         const float* rstd, ConstMatrixView dy, MatrixView dx,
                         float* dw, float* db) override;
  void SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                     MatrixView out) override;
  void SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                      ConstMatrixView dout, MatrixView dgate,
                      MatrixView dup) override;
  void RopeForward(ConstMatrixView x, const int32_t* positions,
                   int64_t rows_per_position, float theta,
                   MatrixView y) override;
  void RopeBackward(ConstMatrixView dy, const int32_t* positions,
                    int64_t rows_per_position, float theta,
                    MatrixView dx) override;
  void RouterForward(ConstMatrixView logits, const float* bias,
                     const RouterSpec& spec, MatrixView scores,
                     MatrixView weights, int32_t* indices) override;
  void RouterBackward(ConstMatrixView scores, const int32_t* indices,
                      ConstMatrixView dweights, const RouterSpec& spec,
                      MatrixView dlogits) override;
  void GroupByExpert(const int32_t* expert, int64_t count, int64_t per_token,
                     int64_t experts, int32_t* slots, int32_t* tokens,
                     int32_t* offsets) override;
  void TokenRows(const int32_t* slots, int64_t count, int64_t per_token,
                 int32_t* token_rows) override;
  void AddRowGroups(ConstMatrixView src, const int32_t* sources,
                    int64_t per_row, const float* scale,
                    MatrixView out) override;
  void AddRowGroupsBackward(ConstMatrixView src, const int32_t* sources,
                            int64_t per_row, const float* scale,
                            ConstMatrixView dout, MatrixView dsrc,
                            MatrixView dscale,
                            const int32_t* dscale_rows) override;
  void AddExpertLoads(const int32_t* offsets, int64_t experts,
                      int32_t* loads) override;
  void GroupedLinear(IndexedRows x, ConstMatrixView w, const int32_t* offsets,
                     int64_t experts, MatrixView y) override;
  void GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                             const int32_t* offsets, int64_t experts,
                             IndexedRows dy, MatrixView dx, bool accumulate_dx,
                             MatrixView dw) override;
  void CrossEntropyForward(ConstMatrixView logits, const int32_t* targets,
                           double divisor, double* sum) override;
  void CrossEntropyBackward(ConstMatrixView logits, const int32_t* targets,
                            float scale, MatrixView dlogits) override;
  void LinearCrossEntropy(ConstMatrixView x, ConstMatrixView w,
                          const int32_t* targets, double divisor, float scale,
                          MatrixView logits, double* sum, MatrixView dx,
                          MatrixView dw) override;
  void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                              ConstMatrixView v, const int32_t* keys,
                              int64_t topk, int64_t full_queries, int64_t heads,
                              float scale, MatrixView out, float* lse) override;
  void SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                               ConstMatrixView v, const int32_t* keys,
                               int64_t topk, int64_t full_queries,
                               int64_t heads, float scale, ConstMatrixView out,
                               const float* lse, ConstMatrixView dout,
                               MatrixView dq, MatrixView dk, MatrixView dv,
                               MatrixView key_weights) override;
  void SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                                 const int32_t* keys, int64_t topk,
                                 int64_t heads, float scale, const float* lse,
                                 MatrixView weights) override;
  void LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                              const int32_t* keys, int64_t topk, int64_t heads,
                              float scale, MatrixView out, float* lse) override;
  void LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, ConstMatrixView out,
                               const float* lse, ConstMatrixView dout,
                               MatrixView dq, MatrixView dkv,
                               MatrixView key_weights) override;
  void IndexerTopK(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                   const int32_t* seq_start, int64_t query_offset, int64_t topk,
                   float scale, KeptIndexerScores* keep,
                   int32_t* keys) override;
  void IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                     const int32_t* keys, int64_t topk, float scale,
                     ConstMatrixView target, float coeff,
                     const KeptIndexerScores* kept, MatrixView diq,
                     MatrixView dik, MatrixView dw, double* sum) override;
  void RefreshComputeCopies(
      const std::vector<ConstFloatSpan>& weights) override;
  double SquaredSum(const std::vector<ConstFloatSpan>& spans) override;
  void AdamWStep(const AdamWHyperparameters& hyper,
                 const std::vector<AdamWTensor>& tensors) override;

 private:
  CpuBackend cpu_;
};

// For tests run both ways: the CPU backend (on `memory`, null: the host's),
// or with `bf16_activations` this one (host memory only).
std::unique_ptr<Backend> MakeCpuTestBackend(bool bf16_activations,
                                            Allocator* memory = nullptr);

}  // namespace glm

#endif  // GLM_KERNELS_CPU_BF16_ACTIVATIONS_BACKEND_H_
