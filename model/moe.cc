#include "model/moe.h"

namespace glm {
namespace {

// A [rows, 1] view over a flat float array.
MatrixView Column(float* data, int64_t rows) { return {data, rows, 1, 1}; }

}  // namespace

RouterSpec MakeRouterSpec(const ModelConfig& config) {
  RouterSpec spec;
  spec.top_k = config.num_experts_per_tok;
  spec.n_group = config.n_group;
  spec.topk_group = config.topk_group;
  spec.norm_topk_prob = config.norm_topk_prob;
  spec.routed_scaling_factor = static_cast<float>(config.routed_scaling_factor);
  return spec;
}

void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts) {
  const int64_t n = x.rows, experts = p.gate.value.dim(0);
  const int64_t inter = p.experts_down.value.dim(2);
  Tensor logits({n, experts});
  backend.Linear(x, p.gate.value.Matrix(), logits.Matrix(), false);
  acts->scores = Tensor({n, experts});
  acts->weights = Tensor({n, spec.top_k});
  acts->choice = IndexTensor({n, spec.top_k});
  backend.RouterForward(logits.Matrix(), p.e_score_correction_bias.data(), spec,
                        acts->scores.Matrix(), acts->weights.Matrix(),
                        acts->choice.data());

  // Group the (token, slot) pairs by expert, in token order (deterministic).
  acts->experts.assign(experts, {});
  acts->load.assign(experts, 0);
  for (int64_t slot = 0; slot < n * spec.top_k; ++slot) {
    ExpertActivations& e = acts->experts[acts->choice.data()[slot]];
    e.tokens.push_back(static_cast<int32_t>(slot / spec.top_k));
    e.slots.push_back(static_cast<int32_t>(slot));
  }
  // The [n, top_k] weights as n * top_k rows of one value, gathered per expert.
  MatrixView weight_rows = Column(acts->weights.data(), n * spec.top_k);

  // Shared experts write `out`; routed experts add their weighted rows to it.
  MlpForward(backend, p.shared_experts, x, out, /*accumulate=*/false,
             &acts->shared);
  for (int64_t id = 0; id < experts; ++id) {
    ExpertActivations& e = acts->experts[id];
    const int64_t rows = static_cast<int64_t>(e.tokens.size());
    acts->load[id] = rows;
    if (rows == 0) continue;
    e.weight = Tensor({rows, 1});
    backend.EmbeddingForward(weight_rows, e.slots.data(), e.weight.Matrix());
    e.x = Tensor({rows, x.cols});
    backend.EmbeddingForward(x, e.tokens.data(), e.x.Matrix());
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
    backend.ScatterAddRows(e.out.Matrix(), e.tokens.data(), e.weight.data(),
                           out);
  }
}

void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx) {
  const int64_t n = x.rows, experts = p.gate.value.dim(0);
  const int64_t inter = p.experts_down.value.dim(2);
  Tensor dweights({n, spec.top_k});
  MatrixView dweight_rows = Column(dweights.data(), n * spec.top_k);
  for (int64_t id = 0; id < experts; ++id) {
    const ExpertActivations& e = acts.experts[id];
    const int64_t rows = static_cast<int64_t>(e.tokens.size());
    if (rows == 0) continue;
    Tensor dexpert_out({rows, x.cols}), dweight({rows, 1});
    backend.ScatterAddRowsBackward(e.out.Matrix(), e.tokens.data(),
                                   e.weight.data(), dout, dexpert_out.Matrix(),
                                   dweight.data());
    backend.ScatterAddRows(dweight.Matrix(), e.slots.data(), nullptr,
                           dweight_rows);
    Tensor dhidden({rows, inter}), dgate_up({rows, 2 * inter}),
        dx_rows({rows, x.cols});
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
    backend.ScatterAddRows(dx_rows.Matrix(), e.tokens.data(), nullptr, dx);
  }
  Tensor dlogits({n, experts});
  backend.RouterBackward(acts.scores.Matrix(), acts.choice.data(),
                         dweights.Matrix(), spec, dlogits.Matrix());
  backend.LinearBackward(x, p.gate.value.Matrix(), dlogits.Matrix(), dx,
                         p.gate.grad.Matrix());
  MlpBackward(backend, p.shared_experts, x, acts.shared, dout, dx);
}

}  // namespace glm
