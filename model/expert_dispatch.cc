#include "model/expert_dispatch.h"

#include <cassert>

namespace glm {

ConstMatrixView AsColumn(ConstMatrixView m) {
  assert(m.stride == m.cols);
  return {m.data, m.rows * m.cols, 1, 1};
}

MatrixView AsColumn(MatrixView m) {
  assert(m.stride == m.cols);
  return {m.data, m.rows * m.cols, 1, 1};
}

std::vector<ExpertActivations> GroupRowsByExpert(const int32_t* expert,
                                                 int64_t rows,
                                                 int64_t rows_per_token,
                                                 int64_t num_experts) {
  std::vector<ExpertActivations> experts(num_experts);
  for (int64_t row = 0; row < rows; ++row) {
    ExpertActivations& e = experts[expert[row]];
    e.tokens.push_back(static_cast<int32_t>(row / rows_per_token));
    e.slots.push_back(static_cast<int32_t>(row));
  }
  return experts;
}

void ExpertsForward(Backend& backend, const MoeParameters& p, ConstMatrixView x,
                    ConstMatrixView weight_rows,
                    std::vector<ExpertActivations>* experts, MatrixView out) {
  const int64_t inter = p.experts_down.value.dim(2);
  for (size_t id = 0; id < experts->size(); ++id) {
    ExpertActivations& e = (*experts)[id];
    const int64_t rows = static_cast<int64_t>(e.tokens.size());
    if (rows == 0) continue;
    e.op_tokens = IndexTensor::FromHost(e.tokens);
    e.op_slots = IndexTensor::FromHost(e.slots);
    e.weight = Tensor({rows, 1});
    backend.EmbeddingForward(weight_rows, e.op_slots.data(), e.weight.Matrix());
    e.x = Tensor({rows, x.cols});
    backend.EmbeddingForward(x, e.op_tokens.data(), e.x.Matrix());
    e.mlp.gate_up = Tensor({rows, 2 * inter});
    e.mlp.hidden = Tensor({rows, inter});
    e.out = Tensor({rows, x.cols});
    MatrixView gate_up = e.mlp.gate_up.Matrix();
    backend.Linear(e.x.Matrix(), p.experts_gate_up.value.Slab(id), gate_up,
                   false);
    backend.SwiGluForward(gate_up.Columns(0, inter),
                          gate_up.Columns(inter, inter), e.mlp.hidden.Matrix());
    backend.Linear(e.mlp.hidden.Matrix(), p.experts_down.value.Slab(id),
                   e.out.Matrix(), false);
    backend.ScatterAddRows(e.out.Matrix(), e.op_tokens.data(), e.weight.data(),
                           out);
  }
}

void ExpertsBackward(Backend& backend, MoeParameters& p,
                     const std::vector<ExpertActivations>& experts,
                     ConstMatrixView dout, MatrixView dx,
                     MatrixView dweight_rows) {
  const int64_t inter = p.experts_down.value.dim(2);
  for (size_t id = 0; id < experts.size(); ++id) {
    const ExpertActivations& e = experts[id];
    const int64_t rows = static_cast<int64_t>(e.tokens.size());
    if (rows == 0) continue;
    Tensor dexpert_out({rows, dout.cols}), dweight({rows, 1});
    backend.ScatterAddRowsBackward(e.out.Matrix(), e.op_tokens.data(),
                                   e.weight.data(), dout, dexpert_out.Matrix(),
                                   dweight.data());
    backend.ScatterAddRows(dweight.Matrix(), e.op_slots.data(), nullptr,
                           dweight_rows);
    Tensor dhidden({rows, inter}), dgate_up({rows, 2 * inter}),
        dx_rows({rows, dout.cols});
    backend.LinearBackward(e.mlp.hidden.Matrix(), p.experts_down.value.Slab(id),
                           dexpert_out.Matrix(), dhidden.Matrix(),
                           p.experts_down.grad.Slab(id));
    ConstMatrixView gate_up = e.mlp.gate_up.Matrix();
    MatrixView dgu = dgate_up.Matrix();
    backend.SwiGluBackward(gate_up.Columns(0, inter),
                           gate_up.Columns(inter, inter), dhidden.Matrix(),
                           dgu.Columns(0, inter), dgu.Columns(inter, inter));
    backend.LinearBackward(e.x.Matrix(), p.experts_gate_up.value.Slab(id), dgu,
                           dx_rows.Matrix(), p.experts_gate_up.grad.Slab(id));
    backend.ScatterAddRows(dx_rows.Matrix(), e.op_tokens.data(), nullptr, dx);
  }
}

void LocalExpertDispatcher::Forward(Backend& backend, const MoeParameters& p,
                                    ConstMatrixView x, const int32_t* choice,
                                    ConstMatrixView weights, MatrixView out,
                                    RoutedActivations* acts) {
  acts->experts = {GroupRowsByExpert(choice, x.rows * weights.cols,
                                     weights.cols, p.gate.value.dim(0))};
  ExpertsForward(backend, p, x, AsColumn(weights), &acts->experts[0], out);
}

void LocalExpertDispatcher::Backward(Backend& backend, MoeParameters& p,
                                     const RoutedActivations& acts,
                                     ConstMatrixView dout, MatrixView dx,
                                     MatrixView dweights) {
  ExpertsBackward(backend, p, acts.experts[0], dout, dx, AsColumn(dweights));
}

}  // namespace glm
