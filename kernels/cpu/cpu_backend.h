// The reference backend: host memory, OpenMP over rows, GEMMs through OpenBLAS.
#ifndef GLM_KERNELS_CPU_CPU_BACKEND_H_
#define GLM_KERNELS_CPU_CPU_BACKEND_H_

#include <initializer_list>

#include "kernels/backend.h"

namespace glm {

class CpuBackend : public Backend {
 public:
  CpuBackend() = default;
  // Tensors for this backend live on `memory` (not owned; a host-memory
  // allocator standing in for a device's, for tests of the device paths).
  explicit CpuBackend(Allocator* memory) : memory_(memory) {}

  std::string Name() const override { return "cpu"; }
  Allocator* allocator() override { return memory_; }

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
  // fp32 products read the weights themselves.
  void RefreshComputeCopies(
      const std::vector<ConstFloatSpan>& weights) override {}
  double SquaredSum(const std::vector<ConstFloatSpan>& spans) override;
  void AdamWStep(const AdamWHyperparameters& hyper,
                 const std::vector<AdamWTensor>& tensors) override;

 private:
  // With a `memory` that can tell: aborts naming `op` when an operand lies
  // outside it (a device backend would read a host pointer there).
  void CheckHeld(const char* op,
                 std::initializer_list<const void*> pointers) const;

  Allocator* memory_ = nullptr;
};

}  // namespace glm

#endif  // GLM_KERNELS_CPU_CPU_BACKEND_H_
