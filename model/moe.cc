#include "model/moe.h"

#include <utility>

namespace glm {

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
                MoeActivations* acts, ExpertDispatcher& experts) {
  const int64_t n = x.rows, num_experts = p.gate.value.dim(0);
  Tensor logits = Tensor::ForOutput({n, num_experts});
  backend.Linear(x, p.gate.value.Matrix(), logits.Matrix(), false);
  acts->scores = Tensor::ForOutput({n, num_experts});
  acts->weights = Tensor::ForOutput({n, spec.top_k});
  acts->choice = IndexTensor({n, spec.top_k});
  backend.RouterForward(logits.Matrix(), p.e_score_correction_bias.data(), spec,
                        acts->scores.Matrix(), acts->weights.Matrix(),
                        acts->choice.data());
  // The choices grouped by expert on the backend; the sizes stay there.
  ExpertGrouping grouping = GroupRowsByExpert(
      backend, acts->choice.data(), n * spec.top_k, spec.top_k, num_experts);
  acts->expert_offsets = grouping.offsets;
  // Shared experts write `out`; routed experts add their weighted rows to it.
  MlpForward(backend, p.shared_experts, x, {}, out, &acts->shared);
  experts.Forward(backend, p, x, std::move(grouping), acts->weights.Matrix(),
                  out, &acts->routed);
}

std::vector<int64_t> ExpertLoad(const MoeActivations& acts) {
  if (acts.expert_offsets.numel() == 0) return {};
  const std::vector<int32_t> offsets = acts.expert_offsets.HostValues();
  std::vector<int64_t> load(offsets.size() - 1);
  for (size_t e = 0; e < load.size(); ++e)
    load[e] = offsets[e + 1] - offsets[e];
  return load;
}

void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx,
                 ExpertDispatcher& experts) {
  const int64_t n = x.rows, num_experts = p.gate.value.dim(0);
  Tensor dweights({n, spec.top_k});
  experts.Backward(backend, p, acts.routed, dout, dx, dweights.Matrix());
  Tensor dlogits({n, num_experts});
  backend.RouterBackward(acts.scores.Matrix(), acts.choice.data(),
                         dweights.Matrix(), spec, dlogits.Matrix());
  backend.LinearBackward(x, p.gate.value.Matrix(), dlogits.Matrix(), dx,
                         p.gate.grad.Matrix());
  MlpBackward(backend, p.shared_experts, x, acts.shared, dout, dx);
}

void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts) {
  LocalExpertDispatcher local;
  MoeForward(backend, p, spec, x, out, acts, local);
}

void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx) {
  LocalExpertDispatcher local;
  MoeBackward(backend, p, spec, x, acts, dout, dx, local);
}

}  // namespace glm
