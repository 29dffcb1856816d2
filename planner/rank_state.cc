#include "planner/rank_state.h"

#include <vector>

#include "planner/rank_tensor_list.h"

namespace glm {
namespace {

constexpr int64_t kFp32Bytes = 4;
constexpr int64_t kBf16Bytes = 2;

// Elements the optimizer of any rank with `tensors` updates, by the rank's
// place in the shard groups.
class UpdatedElements {
 public:
  UpdatedElements(const PlanJob& job, const SplitPlan& plan,
                  const RankTensors& tensors)
      : job_(job),
        plan_(plan),
        lists_(OptimizerListsOf(job, plan, TrainableOf(job, tensors))),
        dense_(ShardElements(lists_.dense, lists_.dense_ranks)),
        experts_(ShardElements(lists_.experts, lists_.expert_ranks)) {}

  int64_t At(const RankCoordinates& c) const {
    return dense_[lists_.DenseIndex(c, plan_, job_)] +
           experts_[lists_.ExpertIndex(c)];
  }

 private:
  const PlanJob& job_;
  const SplitPlan& plan_;
  OptimizerLists lists_;
  std::vector<int64_t> dense_, experts_;
};

// What a rank's lists add up to, whatever its place in the shard groups.
struct HeldElements {
  int64_t parameters = 0, buffers = 0, adapters = 0, held_adapters = 0;
  int64_t held_targets = 0;

  explicit HeldElements(const RankTensors& tensors)
      : held_targets(tensors.held_target_elements) {
    for (const RankTensor& t : tensors.held) {
      (t.trainable ? parameters : buffers) += t.elements;
    }
    for (const RankTensor& a : tensors.adapters) {
      adapters += a.elements;
      if (a.trainable) held_adapters += a.elements;
    }
  }
};

StateBytes BytesOf(const PlanJob& job, const HeldElements& held,
                   int64_t updated) {
  const bool lora = job.kind == TrainingKind::kLora;
  StateBytes bytes;
  bytes.moments = 2 * kFp32Bytes * updated;
  if (job.precision == Precision::kFp32) {
    bytes.weights = kFp32Bytes * (held.parameters + held.buffers);
    bytes.gradients = kFp32Bytes * held.parameters;
    if (lora) {
      bytes.adapters =
          2 * kFp32Bytes * held.adapters + kFp32Bytes * held.held_targets;
    }
    return bytes;
  }
  bytes.weights = kBf16Bytes * held.parameters + kFp32Bytes * held.buffers;
  bytes.master = kFp32Bytes * updated;
  if (lora) {
    bytes.adapters = (kBf16Bytes + kFp32Bytes) * held.held_adapters;
  } else {
    bytes.gradients = kFp32Bytes * held.parameters;
  }
  return bytes;
}

}  // namespace

StateBytes RankStateBytes(const PlanJob& job, const SplitPlan& plan,
                          const RankCoordinates& c) {
  const std::shared_ptr<const RankTensors> tensors =
      RankTensorsAt(job, plan, c);
  return BytesOf(job, HeldElements(*tensors),
                 UpdatedElements(job, plan, *tensors).At(c));
}

StateBytes PipelineRankStateBytes(const PlanJob& job, const SplitPlan& plan,
                                  int pp_rank) {
  // Tensor and expert ranks hold parts of equal size; only the optimizer
  // shards differ, by the rank's data, context and expert-data position.
  std::vector<const RankCoordinates*> ranks;
  for (const RankCoordinates& c : plan.grid.ranks) {
    if (c.pp == pp_rank) ranks.push_back(&c);
  }
  const std::shared_ptr<const RankTensors> tensors =
      RankTensorsAt(job, plan, *ranks.front());
  const UpdatedElements updated(job, plan, *tensors);
  const HeldElements held(*tensors);
  StateBytes largest;
  for (const RankCoordinates* c : ranks) {
    const StateBytes bytes = BytesOf(job, held, updated.At(*c));
    if (bytes.Total() > largest.Total()) largest = bytes;
  }
  return largest;
}

}  // namespace glm
