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
#include "model/parameters.h"

namespace glm {

// The tokens one expert processes, in token order, and what its backward needs.
struct ExpertActivations {
  std::vector<int32_t> tokens;  // token index per row
  std::vector<int32_t>
      slots;           // token * top_k + k: where its router weight lives
  Tensor weight;       // [rows, 1] router weight per row
  Tensor x;            // [rows, hidden]
  MlpActivations mlp;  // gate_up [rows, 2I], hidden [rows, I]
  Tensor out;          // [rows, hidden] before weighting
};

struct MoeActivations {
  Tensor scores;       // [n, E] sigmoid router scores
  Tensor weights;      // [n, top_k]
  IndexTensor choice;  // [n, top_k] expert per slot
  std::vector<ExpertActivations> experts;
  MlpActivations shared;
  std::vector<int64_t> load;  // tokens per expert
};

RouterSpec MakeRouterSpec(const ModelConfig& config);

void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts);
void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx);

}  // namespace glm

#endif  // GLM_MODEL_MOE_H_
