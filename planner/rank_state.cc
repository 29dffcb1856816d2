#include "planner/rank_state.h"

#include <vector>

#include "kernels/bf16_copy_layout.h"
#include "kernels/tensor_arena.h"
#include "planner/rank_tensor_list.h"

namespace glm {
namespace {

constexpr int64_t kFp32Bytes = 4;
constexpr int64_t kBf16Bytes = 2;

// What the optimizer of a rank updates: elements, and the bytes one moment of
// them takes in this trainer's flat moment buffers (kernels/tensor_arena.h:
// each tensor's rounded up to 256 bytes).
struct Updated {
  int64_t elements = 0;
  int64_t arena_bytes = 0;
};

int64_t ArenaBytesOf(const RankTensor& t) { return ArenaBytes(t.elements); }

// What the optimizer of any rank with `tensors` updates, by the rank's place
// in the shard groups.
class UpdatedTensors {
 public:
  UpdatedTensors(const PlanJob& job, const SplitPlan& plan,
                 const RankTensors& tensors)
      : job_(job),
        plan_(plan),
        lists_(OptimizerListsOf(job, plan, TrainableOf(job, tensors))),
        dense_(ShardElements(lists_.dense, lists_.dense_ranks)),
        experts_(ShardElements(lists_.experts, lists_.expert_ranks)),
        dense_bytes_(
            ShardTotals(lists_.dense, lists_.dense_ranks, ArenaBytesOf)),
        expert_bytes_(
            ShardTotals(lists_.experts, lists_.expert_ranks, ArenaBytesOf)) {}

  Updated At(const RankCoordinates& c) const {
    const int dense = lists_.DenseIndex(c, plan_, job_);
    const int experts = lists_.ExpertIndex(c);
    return {dense_[dense] + experts_[experts],
            dense_bytes_[dense] + expert_bytes_[experts]};
  }

 private:
  const PlanJob& job_;
  const SplitPlan& plan_;
  OptimizerLists lists_;
  std::vector<int64_t> dense_, experts_, dense_bytes_, expert_bytes_;
};

// What a rank's lists add up to, whatever its place in the shard groups.
struct HeldElements {
  int64_t parameters = 0, buffers = 0, adapters = 0, held_adapters = 0;
  int64_t held_targets = 0;
  // The allocation of bf16 copies of the held product weights.
  int64_t copy_bytes = 0;

  explicit HeldElements(const RankTensors& tensors)
      : held_targets(tensors.held_target_elements) {
    std::vector<int64_t> products;
    for (const RankTensor& t : tensors.held) {
      (t.trainable ? parameters : buffers) += t.elements;
      if (t.product_weight) products.push_back(t.elements);
    }
    copy_bytes = LayOutBf16Copies(products).bytes;
    for (const RankTensor& a : tensors.adapters) {
      adapters += a.elements;
      if (a.trainable) held_adapters += a.elements;
    }
  }
};

StateBytes BytesOf(const PlanJob& job, const HeldElements& held,
                   const Updated& updated) {
  const bool lora = job.kind == TrainingKind::kLora;
  StateBytes bytes;
  bytes.moments = 2 * kFp32Bytes * updated.elements;
  if (IsTrainerStore(job.precision)) {
    // AdamW makes moments where their weights live: the model's weights on a
    // device get theirs in two flat buffers there (in host memory, a tensor
    // each takes up to 252 bytes less); LoRA's adapters' moments are counted
    // a tensor each, as in host memory (a device's flat buffers round each
    // adapter up to 256 bytes: a few kB more for a whole model).
    if (!lora) bytes.moments = 2 * updated.arena_bytes;
    bytes.weights = kFp32Bytes * (held.parameters + held.buffers);
    bytes.gradients = kFp32Bytes * held.parameters;
    if (job.precision == Precision::kFp32Bf16Copies) {
      bytes.copies = held.copy_bytes;
    }
    if (lora) {
      bytes.adapters =
          2 * kFp32Bytes * held.adapters + kFp32Bytes * held.held_targets;
    }
    return bytes;
  }
  bytes.weights = kBf16Bytes * held.parameters + kFp32Bytes * held.buffers;
  bytes.master = kFp32Bytes * updated.elements;
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
                 UpdatedTensors(job, plan, *tensors).At(c));
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
  const UpdatedTensors updated(job, plan, *tensors);
  const HeldElements held(*tensors);
  StateBytes largest;
  for (const RankCoordinates* c : ranks) {
    const StateBytes bytes = BytesOf(job, held, updated.At(*c));
    if (bytes.Total() > largest.Total()) largest = bytes;
  }
  return largest;
}

}  // namespace glm
