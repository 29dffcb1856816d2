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
  // The choices grouped by expert: the offsets ([E + 1]) of each block of
  // tokens grouped on its own (one for the micro batch; one a chunk under
  // ExpertChunking). The layer's loads are their differences summed.
  std::vector<IndexTensor> expert_offsets;
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

// How a long micro batch runs its routed experts in this process: a chunk of
// `tokens` tokens at a time, each chunk grouped by expert on its own, so
// that with `recompute` (the layers recomputed in the backward) the layer
// holds one chunk's expert rows at a time: its forward keeps of each chunk
// the grouping and router weights only, and its backward forms the chunk's
// rows again before their gradients (the same ops on the same rows: bitwise
// the rows a forward keeps). Micro batches of at most `tokens` tokens run in
// one piece; 0: always.
struct ExpertChunking {
  int64_t tokens = 0;
  bool recompute = false;
};

// At glm5.2-mini's shapes one chunk's expert rows and their gradients take
// about 3.2 GiB (a 64k micro batch's 12.75 GiB in four).
inline constexpr int64_t kDefaultExpertChunkTokens = 16384;

// Every expert in this process, long micro batches in chunks.
void MoeForward(Backend& backend, const MoeParameters& p,
                const RouterSpec& spec, ConstMatrixView x, MatrixView out,
                MoeActivations* acts, const ExpertChunking& chunking = {});
void MoeBackward(Backend& backend, MoeParameters& p, const RouterSpec& spec,
                 ConstMatrixView x, const MoeActivations& acts,
                 ConstMatrixView dout, MatrixView dx,
                 const ExpertChunking& chunking = {});

}  // namespace glm

#endif  // GLM_MODEL_MOE_H_
