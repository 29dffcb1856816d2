// What one rank of the parallel grid holds of the model: the tensors its
// pipeline stages read (parallel/stage_parameters.h), of the routed experts
// its expert-parallel range (parallel/expert_parallel_dispatch.h), of the
// tensor-parallel projections its rows or columns (parallel/
// tensor_parallel_shard.h). A rank allocates, initializes and loads only
// that (ModelParameters(config, HeldTensorsOf(...))), so its memory scales
// with its share of the model.
#ifndef GLM_PARALLEL_RANK_TENSORS_H_
#define GLM_PARALLEL_RANK_TENSORS_H_

#include <optional>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "parallel/pipeline_layout.h"

namespace glm {

struct RankShare {
  // Every stage of the layout (absent: one pipeline rank runs the whole
  // model) and this rank's pp rank.
  std::optional<std::vector<StageSlice>> plan;
  int pp_rank = 0;
  int tp = 1;
  int tp_rank = 0;
  int ep = 1;
  int ep_rank = 0;
};

// The tensors and parts `share` holds. `tp` must divide the split
// dimensions and `ep` the routed experts (the trainer checks both).
HeldTensors HeldTensorsOf(const ModelConfig& config, const RankShare& share);

}  // namespace glm

#endif  // GLM_PARALLEL_RANK_TENSORS_H_
