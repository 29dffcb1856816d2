#include "model/expert_dispatch.h"

#include <cassert>
#include <utility>

namespace glm {

ConstMatrixView AsColumn(ConstMatrixView m) {
  assert(m.stride == m.cols);
  return {m.data, m.rows * m.cols, 1, 1};
}

MatrixView AsColumn(MatrixView m) {
  assert(m.stride == m.cols);
  return {m.data, m.rows * m.cols, 1, 1};
}

ExpertGrouping GroupRowsByExpert(Backend& backend, const int32_t* expert,
                                 int64_t rows, int64_t rows_per_token,
                                 int64_t num_experts) {
  ExpertGrouping g;
  g.slots = IndexTensor({rows});
  g.tokens = IndexTensor({rows});
  g.offsets = IndexTensor({num_experts + 1});
  backend.GroupByExpert(expert, rows, rows_per_token, num_experts,
                        g.slots.data(), g.tokens.data(), g.offsets.data());
  if (rows_per_token > 1) {
    g.token_rows = IndexTensor({rows});
    backend.TokenRows(g.slots.data(), rows, rows_per_token,
                      g.token_rows.data());
  }
  return g;
}

void AddRowsToTokens(Backend& backend, const ExpertGrouping& g,
                     ConstMatrixView rows, const float* scale, MatrixView out) {
  if (g.token_rows.numel() > 0) {
    // Every token's every choice: rows.rows is a whole multiple of out.rows.
    assert(rows.rows % out.rows == 0);
    backend.AddRowGroups(rows, g.token_rows.data(), rows.rows / out.rows, scale,
                         out);
    return;
  }
  backend.ScatterAddRows(rows, g.tokens.data(), scale, out);
}

void AddRowsToTokensBackward(Backend& backend, const ExpertGrouping& g,
                             ConstMatrixView rows, const float* scale,
                             ConstMatrixView dout, MatrixView drows,
                             MatrixView dscale) {
  if (g.token_rows.numel() > 0) {
    assert(rows.rows % dout.rows == 0);
    backend.AddRowGroupsBackward(rows, g.token_rows.data(),
                                 rows.rows / dout.rows, scale, dout, drows,
                                 dscale, g.slots.data());
    return;
  }
  backend.ScatterAddRowsBackward(rows, g.tokens.data(), scale, dout, drows,
                                 dscale, g.slots.data());
}

void ExpertProducts(Backend& backend, const MoeParameters& p,
                    ConstMatrixView inputs, const int32_t* offsets,
                    MlpActivations* mlp, MatrixView out) {
  const int64_t inter = p.experts_down.value.dim(2),
                experts = p.experts_down.value.dim(0), rows = inputs.rows;
  // Read only by products, SwiGLU and the combine (and kept for their
  // backward): in the activation type.
  const ElementType activation = backend.ActivationType();
  mlp->gate_up = Tensor::ForOutput({rows, 2 * inter}, activation);
  mlp->hidden = Tensor::ForOutput({rows, inter}, activation);
  MatrixView gate_up = mlp->gate_up.Matrix();
  backend.GroupedLinear(inputs, p.experts_gate_up.value.Matrix(), offsets,
                        experts, gate_up);
  backend.SwiGluForward(gate_up.Columns(0, inter),
                        gate_up.Columns(inter, inter), mlp->hidden.Matrix());
  backend.GroupedLinear(mlp->hidden.Matrix(), p.experts_down.value.Matrix(),
                        offsets, experts, out);
}

void ExpertProductsBackward(Backend& backend, MoeParameters& p,
                            ConstMatrixView inputs, const MlpActivations& mlp,
                            const int32_t* offsets, ConstMatrixView dout_rows,
                            MatrixView dx_rows) {
  const int64_t inter = p.experts_down.value.dim(2),
                experts = p.experts_down.value.dim(0), rows = inputs.rows;
  // Written, not added (their buffers start unfilled); read only by a
  // product or SwiGLU's backward: the activation type.
  const ElementType activation = backend.ActivationType();
  Tensor dhidden = Tensor::ForOutput({rows, inter}, activation),
         dgate_up = Tensor::ForOutput({rows, 2 * inter}, activation);
  backend.GroupedLinearBackward(
      mlp.hidden.Matrix(), p.experts_down.value.Matrix(), offsets, experts,
      dout_rows, dhidden.Matrix(), /*accumulate_dx=*/false,
      p.experts_down.grad.Matrix());
  ConstMatrixView gate_up = mlp.gate_up.Matrix();
  MatrixView dgu = dgate_up.Matrix();
  backend.SwiGluBackward(gate_up.Columns(0, inter),
                         gate_up.Columns(inter, inter), dhidden.Matrix(),
                         dgu.Columns(0, inter), dgu.Columns(inter, inter));
  backend.GroupedLinearBackward(
      inputs, p.experts_gate_up.value.Matrix(), offsets, experts, dgu, dx_rows,
      /*accumulate_dx=*/false, p.experts_gate_up.grad.Matrix());
}

void FormExpertRows(Backend& backend, const MoeParameters& p, ConstMatrixView x,
                    const ExpertGrouping& g, Tensor* inputs,
                    MlpActivations* mlp, Tensor* out) {
  const int64_t rows = g.rows();
  const ElementType activation = backend.ActivationType();
  *inputs = Tensor::ForOutput({rows, x.cols}, activation);
  backend.EmbeddingForward(x, g.tokens.data(), inputs->Matrix());
  *out = Tensor::ForOutput({rows, x.cols}, activation);
  ExpertProducts(backend, p, inputs->Matrix(), g.offsets.data(), mlp,
                 out->Matrix());
}

void ExpertsForward(Backend& backend, const MoeParameters& p, ConstMatrixView x,
                    ConstMatrixView weight_rows, ExpertRows* e,
                    MatrixView out) {
  const int64_t rows = e->grouping.rows();
  if (rows == 0) return;
  const ExpertGrouping& g = e->grouping;
  e->weight = Tensor::ForOutput({rows, 1});
  backend.EmbeddingForward(weight_rows, g.slots.data(), e->weight.Matrix());
  FormExpertRows(backend, p, x, g, &e->inputs, &e->mlp, &e->out);
  AddRowsToTokens(backend, g, e->out.Matrix(), e->weight.data(), out);
}

void DropExpertRows(ExpertRows* e) {
  e->inputs = Tensor();
  e->mlp = MlpActivations();
  e->out = Tensor();
}

void ExpertsBackward(Backend& backend, MoeParameters& p, const ExpertRows& e,
                     ConstMatrixView dout, MatrixView dx,
                     MatrixView dweight_rows) {
  ExpertsBackward(backend, p, e.grouping, e.weight.data(), e.inputs.Matrix(),
                  e.mlp, e.out.Matrix(), dout, dx, dweight_rows);
}

void ExpertsBackward(Backend& backend, MoeParameters& p,
                     const ExpertGrouping& g, const float* weight,
                     ConstMatrixView inputs, const MlpActivations& mlp,
                     ConstMatrixView out, ConstMatrixView dout, MatrixView dx,
                     MatrixView dweight_rows) {
  const int64_t rows = g.rows();
  if (rows == 0) return;
  const ElementType activation = backend.ActivationType();
  Tensor dout_rows = Tensor::ForOutput({rows, dout.cols}, activation),
         dx_rows = Tensor::ForOutput({rows, dout.cols}, activation);
  // The routing weights' gradients (each row's written at its slot: the
  // grouping holds every slot once) and, in the same pass over dout, the
  // experts' output gradient: each row's token's dout times its weight.
  AddRowsToTokensBackward(backend, g, out, weight, dout, dout_rows.Matrix(),
                          dweight_rows);
  ExpertProductsBackward(backend, p, inputs, mlp, g.offsets.data(),
                         dout_rows.Matrix(), dx_rows.Matrix());
  AddRowsToTokens(backend, g, dx_rows.Matrix(), nullptr, dx);
}

void LocalExpertDispatcher::Forward(Backend& backend, const MoeParameters& p,
                                    ConstMatrixView x, ExpertGrouping grouping,
                                    ConstMatrixView weights, MatrixView out,
                                    RoutedActivations* acts) {
  acts->experts.assign(1, ExpertRows());
  acts->experts[0].grouping = std::move(grouping);
  ExpertsForward(backend, p, x, AsColumn(weights), &acts->experts[0], out);
}

void LocalExpertDispatcher::Backward(Backend& backend, MoeParameters& p,
                                     const RoutedActivations& acts,
                                     ConstMatrixView dout, MatrixView dx,
                                     MatrixView dweights) {
  ExpertsBackward(backend, p, acts.experts[0], dout, dx, AsColumn(dweights));
}

}  // namespace glm
