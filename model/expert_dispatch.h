// Where a MoE layer's routed experts run: all of them in this process, or,
// under expert parallelism, each on the rank that holds it (tokens travel
// there and back). The router and the shared experts stay with the layer.
#ifndef GLM_MODEL_EXPERT_DISPATCH_H_
#define GLM_MODEL_EXPERT_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "model/dense_mlp.h"
#include "model/parameters.h"

namespace glm {

// Rows grouped by expert in the backend's memory (Backend::GroupByExpert):
// position p reads input row tokens[p] and router weight slots[p]; expert e
// owns positions [offsets[e], offsets[e+1]), each expert's rows in row order
// (so every sum over them is deterministic).
// Where every choice of the tokens is grouped (rows_per_token > 1),
// token_rows lists each token's positions in order (Backend::TokenRows), so
// the combine and its gradient add rows without sorting; else it is empty.
struct ExpertGrouping {
  IndexTensor slots, tokens, offsets, token_rows;
  int64_t rows() const { return slots.numel(); }
};

// Groups `rows` rows by expert[row] (backend memory): row r reads input row
// r / rows_per_token and router weight r.
ExpertGrouping GroupRowsByExpert(Backend& backend, const int32_t* expert,
                                 int64_t rows, int64_t rows_per_token,
                                 int64_t num_experts);

// A block of grouped rows run through the experts together, and what its
// backward needs.
struct ExpertRows {
  ExpertGrouping grouping;
  Tensor weight;  // [rows, 1] router weight per row
  // [rows, hidden] the rows the experts read (row p is x[grouping.tokens[p]]),
  // gathered once in the activation type: the first grouped product reads
  // them in both passes (its backward would gather them again).
  Tensor inputs;
  MlpActivations mlp;  // gate_up [rows, 2I], hidden [rows, I]
  Tensor out;          // [rows, hidden] before weighting
};

// out[tokens] += weight * SwiGLU_expert(x[tokens]) for every grouped row:
// one gather of x's rows (kept in rows->inputs), the products
// (ExpertProducts) and one weighted combine (AddRowsToTokens), the experts'
// sizes never leaving the device.
void ExpertsForward(Backend& backend, const MoeParameters& p, ConstMatrixView x,
                    ConstMatrixView weight_rows, ExpertRows* rows,
                    MatrixView out);
// out[g.tokens[p]] += scale[p] * rows[p] for the grouping's rows (scale
// null: 1): by each token's rows where the grouping lists them
// (token_rows), else by a scatter. The same sums either way.
void AddRowsToTokens(Backend& backend, const ExpertGrouping& g,
                     ConstMatrixView rows, const float* scale, MatrixView out);
// Backward of AddRowsToTokens: drows[p] = scale[p] * dout[g.tokens[p]] and
// dscale[g.slots[p]] = rows[p] . dout[g.tokens[p]] (a column), both written;
// by each token's rows where the grouping lists them (each dout row read
// once), else by the scatter's rows.
void AddRowsToTokensBackward(Backend& backend, const ExpertGrouping& g,
                             ConstMatrixView rows, const float* scale,
                             ConstMatrixView dout, MatrixView drows,
                             MatrixView dscale);
// The routed experts on rows grouped by expert (offsets as in
// ExpertGrouping, in the backend's memory): out[p] = expert_e(inputs[p]) for
// p in expert e's rows, by two grouped products around one SwiGLU, whose
// outputs `mlp` keeps for the backward. inputs and out in the activation
// type; out written.
void ExpertProducts(Backend& backend, const MoeParameters& p,
                    ConstMatrixView inputs, const int32_t* offsets,
                    MlpActivations* mlp, MatrixView out);
// Backward of ExpertProducts: dx_rows written (activation type) from
// dout_rows (activation type); the experts' weight gradients accumulate.
void ExpertProductsBackward(Backend& backend, MoeParameters& p,
                            ConstMatrixView inputs, const MlpActivations& mlp,
                            const int32_t* offsets, ConstMatrixView dout_rows,
                            MatrixView dx_rows);
// The grouping's rows through the experts, as ExpertsForward forms them:
// inputs gathered from x, the products' activations and outputs (all
// written). What ExpertsForward keeps, and what a backward whose forward
// dropped them (DropExpertRows) forms again, bitwise the same.
void FormExpertRows(Backend& backend, const MoeParameters& p, ConstMatrixView x,
                    const ExpertGrouping& g, Tensor* inputs,
                    MlpActivations* mlp, Tensor* out);
// Frees what FormExpertRows formed, keeping the grouping and the weights.
void DropExpertRows(ExpertRows* e);
// Backward of ExpertsForward: dx[tokens] accumulates, dweight_rows[slots] is
// written (every slot of the grouping once), and the experts' weight
// gradients accumulate.
void ExpertsBackward(Backend& backend, MoeParameters& p, const ExpertRows& rows,
                     ConstMatrixView dout, MatrixView dx,
                     MatrixView dweight_rows);
// The same from the grouping, its rows' router weights ([rows] F32) and
// FormExpertRows' outputs.
void ExpertsBackward(Backend& backend, MoeParameters& p,
                     const ExpertGrouping& g, const float* weight,
                     ConstMatrixView inputs, const MlpActivations& mlp,
                     ConstMatrixView out, ConstMatrixView dout, MatrixView dx,
                     MatrixView dweight_rows);

// What a dispatcher keeps between forward and backward.
struct RoutedActivations {
  // The experts that ran here, per block of rows run together: one block in
  // process; under expert parallelism one per member the rows came from,
  // each with its grouping's offsets and its products' activations only
  // (its inputs are in `received`, its outputs went back).
  std::vector<ExpertRows> experts;
  // Expert parallelism (parallel/expert_parallel_dispatch.cc): this rank's
  // (token, k) slots grouped by expert, the order they were sent in, and the
  // rows sent to / received from each peer.
  ExpertGrouping sent;
  std::vector<int64_t> send_rows, recv_rows;
  // Expert parallelism, all in the activation type with rows padded to a
  // multiple of eight elements: the hidden states received from the peers
  // (the products' inputs), and the experts' outputs returned for the rows
  // sent; with each sent row's router weight [sent, 1] (F32), which the
  // combine here applies.
  Tensor received, returned, sent_weights;
};

// A dispatcher that exchanges tokens with other ranks can fail; it then
// remembers the first error (status()) and does nothing more, so that the
// layers above it need no error paths and the caller checks once per pass.
class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  // Whether Forward groups the router's choices itself, a block of tokens at
  // a time (each block's grouping in RoutedActivations::experts); else the
  // caller groups them all once and passes the grouping.
  virtual bool GroupsChoices() const { return false; }
  // out[t] += sum_k weights[t, k] * expert_{choice[t * top_k + k]}(x[t]),
  // top_k = weights.cols; `grouping` is the router's choices [n, top_k]
  // grouped by expert, in the backend's memory (the dispatcher may keep it;
  // empty where GroupsChoices()).
  virtual void Forward(Backend& backend, const MoeParameters& p,
                       ConstMatrixView x, ExpertGrouping grouping,
                       ConstMatrixView weights, MatrixView out,
                       RoutedActivations* acts) = 0;
  // dx accumulates; dweights ([n, top_k], zeroed by the caller) gets every
  // slot's routing-weight gradient; the weight gradients of the experts that
  // ran in this process accumulate.
  virtual void Backward(Backend& backend, MoeParameters& p,
                        const RoutedActivations& acts, ConstMatrixView dout,
                        MatrixView dx, MatrixView dweights) = 0;
  // The first failure, or OK.
  virtual absl::Status status() const = 0;
};

// Every expert in this process; never fails.
class LocalExpertDispatcher : public ExpertDispatcher {
 public:
  void Forward(Backend& backend, const MoeParameters& p, ConstMatrixView x,
               ExpertGrouping grouping, ConstMatrixView weights, MatrixView out,
               RoutedActivations* acts) override;
  void Backward(Backend& backend, MoeParameters& p,
                const RoutedActivations& acts, ConstMatrixView dout,
                MatrixView dx, MatrixView dweights) override;
  absl::Status status() const override { return absl::OkStatus(); }
};

// A contiguous [rows, cols] matrix as rows * cols rows of one value (the
// router weights of every (token, k) slot as one column).
ConstMatrixView AsColumn(ConstMatrixView m);
MatrixView AsColumn(MatrixView m);

}  // namespace glm

#endif  // GLM_MODEL_EXPERT_DISPATCH_H_
