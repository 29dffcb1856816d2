#include "model/moe.h"

#include <algorithm>
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
  ExpertGrouping grouping;
  acts->expert_offsets.clear();
  if (!experts.GroupsChoices()) {
    grouping = GroupRowsByExpert(backend, acts->choice.data(), n * spec.top_k,
                                 spec.top_k, num_experts);
    acts->expert_offsets.push_back(grouping.offsets);
  }
  // Shared experts write `out`; routed experts add their weighted rows to it.
  MlpForward(backend, p.shared_experts, x, {}, out, &acts->shared);
  experts.Forward(backend, p, x, std::move(grouping), acts->weights.Matrix(),
                  out, &acts->routed);
  if (experts.GroupsChoices()) {
    for (const ExpertRows& block : acts->routed.experts)
      acts->expert_offsets.push_back(block.grouping.offsets);
  }
}

std::vector<int64_t> ExpertLoad(const MoeActivations& acts) {
  std::vector<int64_t> load;
  for (const IndexTensor& block : acts.expert_offsets) {
    const std::vector<int32_t> offsets = block.HostValues();
    load.resize(offsets.size() - 1, 0);
    for (size_t e = 0; e < load.size(); ++e)
      load[e] += offsets[e + 1] - offsets[e];
  }
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

namespace {

// Every expert in this process, the tokens in chunks (ExpertChunking): one
// block of grouped rows a chunk in RoutedActivations::experts.
class ChunkedExpertDispatcher : public ExpertDispatcher {
 public:
  // x: the layer's input to the experts, which the backward's
  // recomputation reads again.
  ChunkedExpertDispatcher(const MoeActivations& acts, ConstMatrixView x,
                          const ExpertChunking& chunking)
      : acts_(acts), x_(x), chunking_(chunking) {}

  // Each chunk groups its own choices (no grouping of the whole micro batch:
  // the layer's loads are the chunks' summed).
  bool GroupsChoices() const override { return true; }

  void Forward(Backend& backend, const MoeParameters& p, ConstMatrixView,
               ExpertGrouping, ConstMatrixView weights, MatrixView out,
               RoutedActivations* acts) override {
    const int64_t n = x_.rows, top_k = weights.cols;
    const int64_t num_experts = p.gate.value.dim(0);
    acts->experts.clear();
    for (int64_t t0 = 0; t0 < n; t0 += chunking_.tokens) {
      const int64_t count = std::min(chunking_.tokens, n - t0);
      ExpertRows& e = acts->experts.emplace_back();
      e.grouping = GroupRowsByExpert(backend, acts_.choice.data() + t0 * top_k,
                                     count * top_k, top_k, num_experts);
      ExpertsForward(backend, p, x_.Rows(t0, count),
                     AsColumn(weights.Rows(t0, count)), &e,
                     out.Rows(t0, count));
      if (chunking_.recompute) DropExpertRows(&e);
    }
  }

  void Backward(Backend& backend, MoeParameters& p,
                const RoutedActivations& acts, ConstMatrixView dout,
                MatrixView dx, MatrixView dweights) override {
    for (size_t c = 0; c < acts.experts.size(); ++c) {
      const int64_t t0 = static_cast<int64_t>(c) * chunking_.tokens;
      const int64_t count = std::min(chunking_.tokens, dout.rows - t0);
      const ExpertRows& e = acts.experts[c];
      const ConstMatrixView chunk_dout = dout.Rows(t0, count);
      const MatrixView chunk_dx = dx.Rows(t0, count),
                       chunk_dweights = AsColumn(dweights.Rows(t0, count));
      if (!chunking_.recompute) {
        ExpertsBackward(backend, p, e, chunk_dout, chunk_dx, chunk_dweights);
        continue;
      }
      Tensor inputs, out;
      MlpActivations mlp;
      FormExpertRows(backend, p, x_.Rows(t0, count), e.grouping, &inputs, &mlp,
                     &out);
      ExpertsBackward(backend, p, e.grouping, e.weight.data(), inputs.Matrix(),
                      mlp, out.Matrix(), chunk_dout, chunk_dx, chunk_dweights);
    }
  }

  absl::Status status() const override { return absl::OkStatus(); }

 private:
  const MoeActivations& acts_;
  ConstMatrixView x_;
  ExpertChunking chunking_;
};

bool Chunked(const ExpertChunking& chunking, int64_t tokens) {
  return chunking.tokens > 0 && tokens > chunking.tokens;
}

}  // namespace

void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts, const ExpertChunking& chunking) {
  if (Chunked(chunking, x.rows)) {
    ChunkedExpertDispatcher chunked(*acts, x, chunking);
    MoeForward(backend, p, spec, x, out, acts, chunked);
    return;
  }
  LocalExpertDispatcher local;
  MoeForward(backend, p, spec, x, out, acts, local);
}

void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx,
                 const ExpertChunking& chunking) {
  if (Chunked(chunking, x.rows)) {
    ChunkedExpertDispatcher chunked(acts, x, chunking);
    MoeBackward(backend, p, spec, x, acts, dout, dx, chunked);
    return;
  }
  LocalExpertDispatcher local;
  MoeBackward(backend, p, spec, x, acts, dout, dx, local);
}

}  // namespace glm
