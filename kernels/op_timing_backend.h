// A Backend that runs another and times each op: where a step's time goes,
// op by op, for the benchmarks (GLM_OP_TIMES=1 makes MakeBackend wrap its
// backend in one). Each op is followed by Synchronize(), so a device op's time
// is its own and not the launch's; that costs a few microseconds per op, so
// use it to find where the time goes, not to measure the step.
//
// Ops are grouped by what they compute: matrix products by their weight's
// shape (one group per kind of projection), attention and the indexer by
// their sizes. The report, written when the backend is destroyed, lists each
// group's calls, time, share of the wall time since the first op, TFLOP/s
// where the group has a FLOP count and GB/s where it is memory-bound (the
// fewest fp32 bytes the op must move: each operand read or written once, so
// the rate compares with the device's copy bandwidth); the remainder is the
// time spent outside ops (host work, copies, synchronizations).
#ifndef GLM_KERNELS_OP_TIMING_BACKEND_H_
#define GLM_KERNELS_OP_TIMING_BACKEND_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace glm {

// What one op call costs: its FLOPs (products) or the fewest bytes it moves
// (memory-bound ops).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

class OpTimingBackend : public Backend {
 public:
  // Writes the report to `report` (not owned) when destroyed.
  OpTimingBackend(std::unique_ptr<Backend> timed, std::ostream* report);
  ~OpTimingBackend() override;

  std::string Name() const override { return timed_->Name(); }
  Allocator* allocator() override { return timed_->allocator(); }
  ElementType ActivationType() const override {
    return timed_->ActivationType();
  }
  void Synchronize() override { timed_->Synchronize(); }

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

  // The report so far (also written when destroyed).
  void WriteReport(std::ostream& out) const;

  // Told, on the thread that runs each timed op, where it begins (its
  // group's name) and where it ends (null), each time once the device has
  // caught up: a recorder of the device's work attributes kernels to ops
  // with it (GLM_OP_TIMES=1 with GLM_GPU_ACTIVITY=kernels,
  // worker/training_job.cc). Process-wide, for every OpTimingBackend; an
  // empty hook: none.
  using OpHook = std::function<void(const std::string* group)>;
  static void SetOpHook(OpHook hook);

 private:
  using Clock = std::chrono::steady_clock;
  struct Group {
    int64_t calls = 0;
    double seconds = 0;
    double first_seconds = 0;  // the first call (plans, caches, workspaces)
    double flops = 0;          // 0: no FLOP count for this group
    double bytes = 0;          // 0: no byte count (compute-bound groups)
  };
  // Runs `op`, waits for it, and adds its time and cost to group `name`.
  template <typename Op>
  auto Timed(const std::string& name, OpCost cost, Op op);

  std::unique_ptr<Backend> timed_;
  std::ostream* report_;
  std::map<std::string, Group> groups_;
  bool started_ = false;
  Clock::time_point first_op_;
};

}  // namespace glm

#endif  // GLM_KERNELS_OP_TIMING_BACKEND_H_
