#include "planner/rank_tensor_list.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/weight_copies.h"
#include "parallel/rank_tensors.h"
#include "parallel/stage_parameters.h"
#include "parallel/tensor_parallel_shard.h"
#include "training/distributed_optimizer.h"
#include "training/expert_gradients.h"

namespace glm {
namespace {

constexpr char kWeightSuffix[] = ".weight";

// The fused routed-expert tensors, as the trainer tells them apart.
std::set<std::string> RoutedExpertNames(ModelParameters& shapes) {
  std::vector<TrainableTensor> all;
  for (const NamedTensor& named : shapes.Named()) {
    if (named.grad != nullptr) {
      all.push_back({named.name, named.value, named.grad});
    }
  }
  std::set<std::string> names;
  for (const TrainableTensor& t : SplitRoutedExperts(shapes, all).experts) {
    names.insert(t.name);
  }
  return names;
}

// A LoRA target: a 2-D weight "<...>.<module>.weight" of a named module
// (training/lora.h).
bool IsLoraTarget(const LoraOptions& lora, const std::string& name,
                  const std::vector<int64_t>& whole) {
  if (whole.size() != 2 || !absl::EndsWith(name, kWeightSuffix)) return false;
  const std::string stem =
      name.substr(0, name.size() - (sizeof(kWeightSuffix) - 1));
  const std::string module = stem.substr(stem.rfind('.') + 1);
  return std::find(lora.target_modules.begin(), lora.target_modules.end(),
                   module) != lora.target_modules.end();
}

// A [rank, in] and B [out, rank] of a target, cut as the rank's part of its
// weight is: B's rows of a column-parallel weight, A's columns of a
// row-parallel one. Two tensors, as the trainer lists them.
std::vector<RankTensor> AdaptersOf(const LoraOptions& lora,
                                   const std::vector<int64_t>& whole,
                                   const TensorPart& part, bool held) {
  const int64_t in = part.dim == 1 ? part.count : whole[1];
  const int64_t out = part.dim == 0 ? part.count : whole[0];
  RankTensor a{lora.rank * in, held}, b{out * lora.rank, held};
  a.tensor_split = part.dim == 1 && part.count != whole[1];
  b.tensor_split = part.dim == 0 && part.count != whole[0];
  return {a, b};
}

std::string PipelineKey(const SplitPlan& plan) {
  return absl::StrCat(plan.split.pp, "|", plan.layout);
}

// What a rank holds is the pipeline's names (its stages' tensors) with the
// tensor and expert ranks' parts: parallel/rank_tensors.cc lists parts for
// every tensor, held or not, whatever the pipeline.
RankTensors MakeRankTensors(const PlanJob& job, const SplitPlan& plan,
                            const RankCoordinates& c, RankTensorsCache& cache) {
  HeldTensors held = cache.Parts(plan.split.tp, plan.split.ep);
  held.names = cache.HeldNames(plan, c.pp).names;
  const std::set<std::string>& experts = cache.routed_experts();
  const std::set<std::string>& shared = cache.PipelineShared(plan);
  const bool lora = job.kind == TrainingKind::kLora;
  ModelParameters& shapes = cache.shapes();
  RankTensors tensors;
  for (const NamedTensor& named : shapes.Named()) {
    const std::vector<int64_t>& whole = shapes.WholeShape(named.name);
    const bool holds = held.Holds(named.name);
    const bool target = lora && named.grad != nullptr &&
                        IsLoraTarget(job.lora, named.name, whole);
    if (target) {
      for (const RankTensor& adapter :
           AdaptersOf(job.lora, whole, held.PartOf(named.name, whole), holds)) {
        tensors.adapters.push_back(adapter);
      }
    }
    if (!holds) continue;
    RankTensor tensor;
    tensor.elements = NumElements(held.PartShape(named.name, whole));
    tensor.trainable = named.grad != nullptr;
    tensor.routed_experts = experts.count(named.name) > 0;
    tensor.tensor_split =
        plan.split.tp > 1 && TensorParallelDim(named.name) >= 0;
    tensor.pipeline_shared = shared.count(named.name) > 0;
    tensor.product_weight = IsProductWeight(shapes, named);
    if (tensor.routed_experts) tensor.elements /= plan.split.etp;
    if (target) tensors.held_target_elements += tensor.elements;
    tensors.held.push_back(tensor);
  }
  return tensors;
}

}  // namespace

RankTensorsCache::RankTensorsCache(const ModelConfig& model) : model_(model) {
  HeldTensors nothing;
  nothing.names.emplace();
  shapes_ = std::make_unique<ModelParameters>(model_, nothing);
  experts_ = RoutedExpertNames(*shapes_);
}

const HeldTensors& RankTensorsCache::HeldNames(const SplitPlan& plan,
                                               int pp_rank) {
  const std::string key = absl::StrCat(PipelineKey(plan), "|", pp_rank);
  auto found = names_.find(key);
  if (found != names_.end()) return found->second;
  RankShare share;
  // As the worker: a pipeline only when there is more than one pp rank.
  if (plan.split.pp > 1) {
    share.plan = plan.stages;
    share.pp_rank = pp_rank;
  }
  return names_[key] = HeldTensorsOf(model_, share);
}

const std::set<std::string>& RankTensorsCache::PipelineShared(
    const SplitPlan& plan) {
  const std::string key = PipelineKey(plan);
  auto found = shared_.find(key);
  if (found != shared_.end()) return found->second;
  std::set<std::string>& shared = shared_[key];
  if (plan.split.pp > 1) {
    for (std::string& name :
         PipelineTensorsOf(*shapes_, plan.stages, 0).shared) {
      shared.insert(std::move(name));
    }
  }
  return shared;
}

const HeldTensors& RankTensorsCache::Parts(int tp, int ep) {
  const std::string key = absl::StrCat(tp, "|", ep);
  auto found = parts_.find(key);
  if (found != parts_.end()) return found->second;
  RankShare share;
  share.tp = tp;
  share.ep = ep;
  return parts_[key] = HeldTensorsOf(model_, share);
}

std::shared_ptr<const RankTensors> RankTensorsAt(const PlanJob& job,
                                                 const SplitPlan& plan,
                                                 const RankCoordinates& c) {
  std::shared_ptr<RankTensorsCache> cache = plan.tensors_cache;
  if (cache == nullptr) cache = std::make_shared<RankTensorsCache>(job.model);
  // Tensor and expert ranks hold parts of one size, wherever they are.
  const std::string key =
      absl::StrCat(PipelineKey(plan), "|", c.pp, "|", plan.split.tp, "|",
                   plan.split.ep, "|", plan.split.etp);
  auto found = cache->lists().find(key);
  if (found != cache->lists().end()) return found->second;
  auto tensors = std::make_shared<const RankTensors>(
      MakeRankTensors(job, plan, c, *cache));
  cache->lists()[key] = tensors;
  return tensors;
}

std::vector<RankTensor> TrainableOf(const PlanJob& job,
                                    const RankTensors& tensors) {
  const bool lora = job.kind == TrainingKind::kLora;
  std::vector<RankTensor> trainable;
  for (const RankTensor& t : lora ? tensors.adapters : tensors.held) {
    if (t.trainable) trainable.push_back(t);
  }
  return trainable;
}

std::vector<int64_t> ShardTotals(const std::vector<RankTensor>& tensors,
                                 int ranks,
                                 int64_t (*measure)(const RankTensor&)) {
  std::vector<int64_t> sizes;
  for (const RankTensor& t : tensors) sizes.push_back(t.elements);
  const ParameterShards shards(sizes, ranks);
  std::vector<int64_t> totals(ranks, 0);
  for (int r = 0; r < ranks; ++r) {
    for (int64_t t = shards.first(r); t < shards.end(r); ++t) {
      totals[r] += measure(tensors[t]);
    }
  }
  return totals;
}

std::vector<int64_t> ShardElements(const std::vector<RankTensor>& tensors,
                                   int ranks) {
  return ShardTotals(tensors, ranks,
                     [](const RankTensor& t) { return t.elements; });
}

int64_t ElementsOf(const std::vector<RankTensor>& tensors) {
  int64_t total = 0;
  for (const RankTensor& t : tensors) total += t.elements;
  return total;
}

int OptimizerLists::DenseIndex(const RankCoordinates& c, const SplitPlan& plan,
                               const PlanJob& job) const {
  if (dense_ranks == 1) return 0;
  return job.precision == Precision::kBf16Mixed ? c.dp * plan.split.cp + c.cp
                                                : c.dp;
}

OptimizerLists OptimizerListsOf(const PlanJob& job, const SplitPlan& plan,
                                const std::vector<RankTensor>& trainable) {
  const bool megatron = job.precision == Precision::kBf16Mixed;
  const bool experts_apart = megatron || plan.split.ep > 1;
  OptimizerLists lists;
  for (const RankTensor& t : trainable) {
    (experts_apart && t.routed_experts ? lists.experts : lists.dense)
        .push_back(t);
  }
  if (job.distributed_optimizer) {
    lists.dense_ranks = plan.dp() * (megatron ? plan.split.cp : 1);
    // Experts without replicas are updated where they live.
    lists.expert_ranks = experts_apart ? plan.edp() : 1;
  }
  return lists;
}

}  // namespace glm
