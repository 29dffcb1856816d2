// The tensors one rank holds, as the trainer decides (parallel/
// rank_tensors.h), listed by name with their held elements and what the
// trainer does with them, without allocating any: the planner's view of a
// rank for its state (planner/rank_state.h) and its gradient exchanges
// (planner/gradient_exchange.h).
#ifndef GLM_PLANNER_RANK_TENSOR_LIST_H_
#define GLM_PLANNER_RANK_TENSOR_LIST_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "parallel/rank_grid.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

struct RankTensor {
  int64_t elements = 0;
  bool trainable = false;        // a parameter, not a buffer (adapters: held)
  bool routed_experts = false;   // a fused routed-expert tensor
  bool tensor_split = false;     // split over the tensor-parallel ranks
  bool pipeline_shared = false;  // read on more than one pp rank
  // Read by products as a weight: a backend computing in bf16 keeps a copy
  // (model/weight_copies.h).
  bool product_weight = false;
};

struct RankTensors {
  // What the rank holds, in ModelParameters::Named() order; routed experts
  // already divided over etp ranks.
  std::vector<RankTensor> held;
  // LoRA: A then B of every target of the whole model (each rank keeps all,
  // in its tensor-parallel shape), trainable where the target is held.
  std::vector<RankTensor> adapters;
  int64_t held_target_elements = 0;  // LoRA: the held targets' own weights
};

// What the lists are made of, kept for one job: its shapes, each pp rank's
// held names under each layout (HeldTensorsOf without tensor or expert
// parallelism), the parts each tensor and expert size cuts (HeldTensorsOf
// without a pipeline: parts do not depend on it), and the lists made. A
// search over many splits of the job shares one (SplitPlan::tensors_cache):
// each piece takes milliseconds for GLM-5.x.
class RankTensorsCache {
 public:
  explicit RankTensorsCache(const ModelConfig& model);

  ModelParameters& shapes() { return *shapes_; }
  const std::set<std::string>& routed_experts() const { return experts_; }
  const HeldTensors& HeldNames(const SplitPlan& plan, int pp_rank);
  const std::set<std::string>& PipelineShared(const SplitPlan& plan);
  const HeldTensors& Parts(int tp, int ep);
  std::map<std::string, std::shared_ptr<const RankTensors>>& lists() {
    return lists_;
  }

 private:
  ModelConfig model_;
  std::unique_ptr<ModelParameters> shapes_;
  std::set<std::string> experts_;
  std::map<std::string, HeldTensors> names_, parts_;
  std::map<std::string, std::set<std::string>> shared_;
  std::map<std::string, std::shared_ptr<const RankTensors>> lists_;
};

std::shared_ptr<const RankTensors> RankTensorsAt(const PlanJob& job,
                                                 const SplitPlan& plan,
                                                 const RankCoordinates& rank);

// What the trainer updates and exchanges gradients of: the held trainable
// tensors, or with LoRA the held targets' adapters; in the trainer's order.
std::vector<RankTensor> TrainableOf(const PlanJob& job,
                                    const RankTensors& tensors);

// What each of `ranks` shards of `tensors`, dealt as the distributed
// optimizer deals them (training/distributed_optimizer.h), adds up to by
// `measure` of each tensor.
std::vector<int64_t> ShardTotals(const std::vector<RankTensor>& tensors,
                                 int ranks,
                                 int64_t (*measure)(const RankTensor&));
// Elements in each of the shards.
std::vector<int64_t> ShardElements(const std::vector<RankTensor>& tensors,
                                   int ranks);

int64_t ElementsOf(const std::vector<RankTensor>& tensors);

// The trainable tensors as the optimizer shards them: routed experts apart
// (always in Megatron, under expert parallelism in this trainer), each list
// over its group: this trainer's dense tensors over the data-parallel
// ranks, Megatron's over data x context parallel ranks, routed experts over
// the expert-data-parallel ranks. Groups of 1 without ZeRO-1.
struct OptimizerLists {
  std::vector<RankTensor> dense, experts;
  int dense_ranks = 1, expert_ranks = 1;

  // A rank's shard index in each group.
  int DenseIndex(const RankCoordinates& c, const SplitPlan& plan,
                 const PlanJob& job) const;
  int ExpertIndex(const RankCoordinates& c) const {
    return expert_ranks == 1 ? 0 : c.edp;
  }
};
OptimizerLists OptimizerListsOf(const PlanJob& job, const SplitPlan& plan,
                                const std::vector<RankTensor>& trainable);

}  // namespace glm

#endif  // GLM_PLANNER_RANK_TENSOR_LIST_H_
