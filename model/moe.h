// Mixture of experts: sigmoid router with a selection-only correction bias,
// SwiGLU routed experts weighted by the normalized, scaled router scores, plus
// shared experts.
#ifndef GLM_MODEL_MOE_H_
#define GLM_MODEL_MOE_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/dense_mlp.h"
#include "model/expert_dispatch.h"
#include "model/parameters.h"

namespace glm {

struct MoeActivations {
  Tensor scores;             // [n, E] sigmoid router scores
  Tensor weights;            // [n, top_k]
  IndexTensor choice;        // [n, top_k] expert per slot
  RoutedActivations routed;  // the routed experts
  MlpActivations shared;
  IndexTensor expert_offsets;  // [E + 1]: the choices grouped by expert
};

// Tokens per expert of a forward (read from the backend's memory).
std::vector<int64_t> ExpertLoad(const MoeActivations& acts);

RouterSpec MakeRouterSpec(const ModelConfig& config);

// The routed experts run where `experts` puts them (under expert parallelism
// that exchanges tokens with the other ranks of the expert group, which must
// make the same calls).
void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts, ExpertDispatcher& experts);
void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx,
                 ExpertDispatcher& experts);

// Every expert in this process.
void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts);
void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx);

}  // namespace glm

#endif  // GLM_MODEL_MOE_H_
