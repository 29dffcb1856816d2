#include "planner/gradient_exchange.h"

#include <algorithm>
#include <vector>

#include "planner/rank_tensor_list.h"

namespace glm {
namespace {

constexpr int64_t kFp32Bytes = 4;

std::vector<RankTensor> Where(const std::vector<RankTensor>& tensors,
                              bool (*keep)(const RankTensor&)) {
  std::vector<RankTensor> kept;
  for (const RankTensor& t : tensors) {
    if (keep(t)) kept.push_back(t);
  }
  return kept;
}

// ZeRO-1's reduce-scatter of one list: the packed blocks, Gloo's copy of
// them, and the rank's block (the all-gather after the step needs less).
int64_t ShardedExchange(const std::vector<RankTensor>& tensors, int ranks) {
  const std::vector<int64_t> shards = ShardElements(tensors, ranks);
  const int64_t block = *std::max_element(shards.begin(), shards.end());
  return (2 * block * ranks + block) * kFp32Bytes;
}

}  // namespace

int64_t GradientExchangeBytes(const PlanJob& job, const SplitPlan& plan,
                              const RankCoordinates& c) {
  if (job.precision == Precision::kBf16Mixed || plan.world == 1) return 0;
  const std::vector<RankTensor> trainable =
      TrainableOf(job, *RankTensorsAt(job, plan, c));
  const OptimizerLists lists = OptimizerListsOf(job, plan, trainable);
  const bool expert_parallel = plan.split.ep > 1;
  // What tensor and context ranks sum: everything but routed experts, whose
  // gradients are whole on their owner.
  const std::vector<RankTensor>& partial =
      expert_parallel ? lists.dense : trainable;
  int64_t largest = 0;
  if (plan.split.cp > 1) largest = ElementsOf(partial) * kFp32Bytes;
  if (plan.split.tp > 1) {
    const std::vector<RankTensor> whole =
        Where(partial, [](const RankTensor& t) { return !t.tensor_split; });
    largest = std::max(largest, ElementsOf(whole) * kFp32Bytes);
  }
  if (plan.split.pp > 1) {
    const std::vector<RankTensor> shared =
        Where(trainable, [](const RankTensor& t) { return t.pipeline_shared; });
    largest = std::max(largest, ElementsOf(shared) * kFp32Bytes);
  }
  if (!job.distributed_optimizer) {
    // Dense tensors and routed experts are all-reduced one list after the
    // other under expert parallelism, all at once otherwise.
    const int64_t flat = expert_parallel ? std::max(ElementsOf(lists.dense),
                                                    ElementsOf(lists.experts))
                                         : ElementsOf(trainable);
    return std::max(largest, flat * kFp32Bytes);
  }
  largest = std::max(largest, ShardedExchange(lists.dense, lists.dense_ranks));
  if (expert_parallel) {
    // Experts with replicas are sharded like the rest; without, they are
    // not exchanged at all.
    if (lists.expert_ranks > 1) {
      largest =
          std::max(largest, ShardedExchange(lists.experts, lists.expert_ranks));
    }
  }
  return largest;
}

}  // namespace glm
