#include "parallel/rank_tensors.h"

#include <string>

#include "absl/strings/match.h"
#include "parallel/expert_parallel_dispatch.h"
#include "parallel/stage_parameters.h"
#include "parallel/tensor_parallel_shard.h"

namespace glm {
namespace {

bool IsRoutedExperts(const std::string& name) {
  return absl::EndsWith(name, "mlp.experts.gate_up_proj") ||
         absl::EndsWith(name, "mlp.experts.down_proj");
}

}  // namespace

HeldTensors HeldTensorsOf(const ModelConfig& config, const RankShare& share) {
  // The model's names and shapes, nothing allocated.
  HeldTensors nothing;
  nothing.names.emplace();
  ModelParameters shapes(config, nothing);
  HeldTensors held;
  if (share.plan) {
    held.names = PipelineTensorsOf(shapes, *share.plan, share.pp_rank).used;
  }
  const ExpertRange experts =
      ExpertsOfRank(config.n_routed_experts, share.ep, share.ep_rank);
  // Parts are listed for every tensor, held or not: the part this rank holds
  // of a tensor it holds, and would hold of one on another pp rank (LoRA
  // keeps every adapter in this rank's tensor-parallel shape).
  for (const NamedTensor& named : shapes.Named()) {
    const int dim = TensorParallelDim(named.name);
    if (share.tp > 1 && dim >= 0) {
      const int64_t count = shapes.WholeShape(named.name)[dim] / share.tp;
      held.parts[named.name] = {dim, share.tp_rank * count, count};
    } else if (share.ep > 1 && IsRoutedExperts(named.name)) {
      held.parts[named.name] = {0, experts.first, experts.count};
    }
  }
  return held;
}

}  // namespace glm
