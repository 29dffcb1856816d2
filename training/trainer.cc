#include "training/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/weight_copies.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel_shard.h"
#include "training/expert_gradients.h"
#include "training/flops.h"
#include "training/grad_clip.h"
#include "training/gradient_sync.h"
#include "training/pipeline_gradients.h"
#include "training/router_bias.h"
#include "training/token_parallel_gradients.h"

namespace glm {
namespace {

int64_t PeakResidentBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB
}

absl::Status ValidateOptions(const TrainerOptions& o) {
  if (o.train_iters <= 0) {
    return absl::InvalidArgumentError("training.train_iters: must be > 0");
  }
  if (o.micro_batch_size <= 0 || o.global_batch_size <= 0 ||
      o.global_batch_size % o.micro_batch_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch_size: ", o.global_batch_size,
                     " must be a positive multiple of micro_batch_size ",
                     o.micro_batch_size));
  }
  if (o.seq_length <= 1) {
    return absl::InvalidArgumentError("training.seq_length: must be > 1");
  }
  return o.schedule.Validate();
}

// What expert parallelism runs with so far: plain AdamW on full weights.
absl::Status CheckExpertParallel(const TrainerOptions& o,
                                 const Collectives* data_parallel,
                                 const ExpertParallelRank& expert_parallel,
                                 bool pipeline) {
  const int ep = expert_parallel.experts->size();
  if (o.model.n_routed_experts % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.ep: ", o.model.n_routed_experts,
                     " routed experts do not split over ep ", ep));
  }
  if (data_parallel == nullptr) {
    return absl::InvalidArgumentError(
        "parallel.ep: expert parallelism folds over data parallelism, which "
        "is missing");
  }
  return absl::OkStatus();
}

std::vector<int64_t> SizesOf(const std::vector<TrainableTensor>& tensors) {
  std::vector<int64_t> sizes;
  for (const TrainableTensor& tensor : tensors) {
    sizes.push_back(tensor.value->numel());
  }
  return sizes;
}

// Every tensor of `params` that has a gradient, in Named() order.
std::vector<TrainableTensor> WithGradients(ModelParameters& params) {
  std::vector<TrainableTensor> trainable;
  for (const NamedTensor& named : params.Named()) {
    if (named.grad != nullptr) {
      trainable.push_back({named.name, named.value, named.grad});
    }
  }
  return trainable;
}

std::vector<Tensor*> GradsOf(const std::vector<TrainableTensor>& tensors) {
  std::vector<Tensor*> grads;
  for (const TrainableTensor& tensor : tensors) grads.push_back(tensor.grad);
  return grads;
}

std::vector<Tensor*> ValuesOf(const std::vector<TrainableTensor>& tensors) {
  std::vector<Tensor*> values;
  for (const TrainableTensor& tensor : tensors) values.push_back(tensor.value);
  return values;
}

int GroupSize(const Collectives* group) {
  return group == nullptr ? 1 : group->size();
}

// What tensor and context parallelism run with so far: everything but LoRA
// under tensor parallelism. (Micro batches of
// any length split: ranks' parts differ by at most a token.)
absl::Status CheckTokenParallel(const TrainerOptions& o,
                                const TokenParallelRank& rank) {
  return CheckTensorParallelSize(o.model, GroupSize(rank.tensor));
}

// The whole model as one pipeline stage.
absl::StatusOr<StageSlice> WholeModelStage(const ModelConfig& model) {
  LayoutRequest request;
  request.num_layers = model.num_hidden_layers;
  request.mtp_layers = model.num_mtp_layers;
  request.sharing = model.index_sharing;
  absl::StatusOr<std::vector<StageSlice>> stages = PlanStages(request);
  if (!stages.ok()) return stages.status();
  return stages->front();
}

// Adds one micro batch's losses and expert loads (a ForwardResult or
// StageLosses) to the step's totals.
template <typename Losses>
void AddMicroBatch(Losses& losses, StageLosses* totals) {
  totals->lm_loss += losses.lm_loss;
  totals->mtp_loss += losses.mtp_loss;
  totals->indexer_loss += losses.indexer_loss;
  if (totals->expert_load.empty()) {
    totals->expert_load = std::move(losses.expert_load);
    return;
  }
  for (size_t layer = 0; layer < totals->expert_load.size(); ++layer) {
    for (size_t e = 0; e < totals->expert_load[layer].size(); ++e) {
      totals->expert_load[layer][e] += losses.expert_load[layer][e];
    }
  }
}

}  // namespace

RankShare RankShareOf(const std::optional<PipelineRank>& pipeline,
                      const std::optional<ExpertParallelRank>& expert_parallel,
                      const std::optional<TokenParallelRank>& token_parallel) {
  RankShare share;
  if (pipeline) {
    share.plan = pipeline->plan;
    share.pp_rank = pipeline->group->rank();
  }
  if (expert_parallel) {
    share.ep = expert_parallel->experts->size();
    share.ep_rank = expert_parallel->experts->rank();
  }
  if (token_parallel && token_parallel->tensor != nullptr) {
    share.tp = token_parallel->tensor->size();
    share.tp_rank = token_parallel->tensor->rank();
  }
  return share;
}

absl::Status Trainer::ValidateSetup(
    const TrainerOptions& options, const TrainingData& data,
    Collectives* data_parallel, const std::optional<PipelineRank>& pipeline,
    const std::optional<ExpertParallelRank>& expert_parallel,
    const std::optional<TokenParallelRank>& token_parallel) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return status;
  }
  if (token_parallel) {
    if (absl::Status status = CheckTokenParallel(options, *token_parallel);
        !status.ok()) {
      return status;
    }
  }
  if (expert_parallel) {
    if (absl::Status status = CheckExpertParallel(
            options, data_parallel, *expert_parallel, pipeline.has_value());
        !status.ok()) {
      return status;
    }
  }
  const int64_t micro_batches =
      options.global_batch_size / options.micro_batch_size;
  if (data_parallel != nullptr && micro_batches % data_parallel->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.global_batch_size: ", options.global_batch_size,
        " must be a multiple of micro_batch_size ", options.micro_batch_size,
        " x data-parallel size ", data_parallel->size()));
  }
  if (pipeline && pipeline->stages.size() > 1) {
    const int dp = data_parallel == nullptr ? 1 : data_parallel->size();
    absl::StatusOr<std::vector<PipelineOp>> order = PipelineOrder(
        pipeline->group->size(), pipeline->group->rank(),
        static_cast<int>(pipeline->stages.size()), micro_batches / dp);
    if (!order.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.global_batch_size: ", order.status().message()));
    }
  }
  if (pipeline && std::none_of(pipeline->plan.begin(), pipeline->plan.end(),
                               [&](const StageSlice& stage) {
                                 return stage.pp_rank ==
                                        pipeline->group->rank();
                               })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: the layout's stages (", pipeline->plan.size(),
        ") hold none of pp rank ", pipeline->group->rank(),
        "; every stage of the layout is needed to know which tensors the "
        "ranks share"));
  }
  if (options.record_micro_batches &&
      (pipeline || expert_parallel || token_parallel)) {
    return absl::InvalidArgumentError(
        "training.cuda_graphs: recorded micro batches need one model per "
        "rank (parallel.tp, cp, pp and ep 1; data parallelism is fine)");
  }
  if (options.overlap_grad_reduce &&
      (pipeline || expert_parallel || token_parallel || options.lora)) {
    return absl::InvalidArgumentError(
        "training.overlap_grad_reduce: overlapped gradient sums need data "
        "parallelism alone (parallel.tp, cp, pp and ep 1, no LoRA)");
  }
  if (data.seq_length() != options.seq_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset seq_length ", data.seq_length(),
                     " differs from training.seq_length ", options.seq_length));
  }
  const int64_t needed = options.train_iters * options.global_batch_size;
  if (data.size() < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset has ", data.size(), " samples; ", needed,
                     " are needed (train_iters x global_batch_size)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelParameters>> Trainer::RankParameters(
    const TrainerOptions& options, std::unique_ptr<ModelParameters> params,
    const HeldTensors& held) {
  if (params == nullptr) {
    params = std::make_unique<ModelParameters>(options.model, held);
    params->InitRandom(options.seed);
  } else if (absl::Status status = params->KeepHeld(held); !status.ok()) {
    return status;
  }
  return params;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const TrainerOptions& options, std::unique_ptr<TrainingData> data,
    std::unique_ptr<ModelParameters> params, std::unique_ptr<Backend> backend,
    Collectives* data_parallel, std::optional<PipelineRank> pipeline,
    std::optional<ExpertParallelRank> expert_parallel,
    std::optional<TokenParallelRank> token_parallel) {
  if (absl::Status status =
          ValidateSetup(options, *data, data_parallel, pipeline,
                        expert_parallel, token_parallel);
      !status.ok()) {
    return status;
  }
  // The rank allocates and initializes only what it holds; weights given
  // whole are cut to it.
  absl::StatusOr<std::unique_ptr<ModelParameters>> held = RankParameters(
      options, std::move(params),
      HeldTensorsOf(options.model,
                    RankShareOf(pipeline, expert_parallel, token_parallel)));
  if (!held.ok()) return held.status();
  std::optional<LoraAdapters> lora;
  if (options.lora) {
    absl::StatusOr<LoraAdapters> adapters =
        LoraAdapters::Create(held->get(), *options.lora, options.seed + 1);
    if (!adapters.ok()) return adapters.status();
    lora = std::move(*adapters);
  }
  std::unique_ptr<Trainer> trainer(
      new Trainer(options, std::move(data), *std::move(held),
                  std::move(backend), data_parallel));
  trainer->lora_ = std::move(lora);
  if (absl::Status status = trainer->BuildModel(
          std::move(pipeline), expert_parallel, token_parallel);
      !status.ok()) {
    return status;
  }
  trainer->PlaceOptimizer();
  if (absl::Status status = trainer->PlaceGradientSum(); !status.ok()) {
    return status;
  }
  return trainer;
}

absl::Status Trainer::BuildModel(
    std::optional<PipelineRank> pipeline,
    const std::optional<ExpertParallelRank>& expert_parallel,
    const std::optional<TokenParallelRank>& token_parallel) {
  if (token_parallel) {
    Allocator* memory = backend_->allocator();
    tensor_views_ = GroupViews(token_parallel->tensor, memory);
    context_views_ = GroupViews(token_parallel->context, memory);
    const bool on_device = memory != nullptr;
    token_parallel_ = std::make_unique<TokenParallel>(
        tensor_views_.For(on_device), context_views_.For(on_device),
        tensor_views_.host(), context_views_.host());
  }
  if (expert_parallel) {
    // The routed rows go to the expert group where they lie; everything the
    // trainer sends (losses, norms, the host's gradients) from the host.
    expert_dispatcher_ =
        std::make_unique<ExpertParallelDispatcher>(expert_parallel->experts);
    experts_views_ =
        GroupViews(expert_parallel->experts, backend_->allocator());
    expert_data_views_ =
        GroupViews(expert_parallel->expert_data, backend_->allocator());
    expert_parallel_ =
        ExpertParallelRank{experts_views_.host(), expert_data_views_.host()};
  }
  // The whole model in one driver, or stages: the pipeline's, or the whole
  // model as one stage on this rank's tokens under tensor or context
  // parallelism.
  if (!pipeline && !token_parallel_) {
    model_ = std::make_unique<GlmModel>(compute_params(), backend_.get(),
                                        StepLossOptions());
    model_->set_expert_dispatcher(expert_dispatcher_.get());
    if (options_.record_micro_batches) recorded_.emplace(backend_.get());
    return absl::OkStatus();
  }
  std::vector<StageSlice> slices;
  if (pipeline) {
    slices = pipeline->stages;
  } else {
    absl::StatusOr<StageSlice> whole = WholeModelStage(options_.model);
    if (!whole.ok()) return whole.status();
    slices.push_back(*whole);
  }
  for (const StageSlice& slice : slices) {
    absl::StatusOr<StageModel> stage = StageModel::Create(
        compute_params(), backend_.get(), StepLossOptions(), slice);
    if (!stage.ok()) return stage.status();
    stage->set_expert_dispatcher(expert_dispatcher_.get());
    stage->set_token_parallel(token_parallel_.get());
    stages_.push_back(*std::move(stage));
  }
  if (!pipeline) return absl::OkStatus();
  pipeline_tensors_ =
      PipelineTensorsOf(*params_, pipeline->plan, pipeline->group->rank());
  pipeline_views_ = GroupViews(pipeline->group, backend_->allocator());
  pipeline_link_views_ =
      PipelineLinkViews(pipeline->links, backend_->allocator());
  pipeline_ = std::move(pipeline);
  // Its collectives (losses, norms, checkpoint sums) read host memory.
  pipeline_->group = pipeline_views_.host();
  return CheckLoraUnderPipeline();
}

void Trainer::PlaceOptimizer() {
  // Every rank (data-, expert-, tensor-, context- or pipeline-parallel,
  // ZeRO-1 or not, LoRA or not): everything a step does runs where the model
  // computes (the adapters merged and trained, the gradients summed and
  // ZeRO-1's updated shards exchanged where they lie), so the weights and the
  // optimizer stay on the device.
  if (device_params_) {
    device_optimizer_.emplace(options_.adamw);
    if (lora_) {
      device_lora_ =
          lora_->MirrorOn(device_params_.get(), backend_->allocator());
    }
  }
  // Shards of the tensors this rank trains (its stages' under pp).
  if (data_parallel_ == nullptr || !options_.distributed_optimizer) return;
  if (!expert_parallel_) {
    shards_.emplace(SizesOf(Trainable()), data_parallel_->size());
    return;
  }
  const ExpertSplit split = SplitRoutedExperts(*params_, Trainable());
  shards_.emplace(SizesOf(split.dense), data_parallel_->size());
  // Routed experts replicated over an expert-data group are sharded over it,
  // when this rank trains any (LoRA trains none).
  Collectives* expert_data = expert_parallel_->expert_data;
  if (expert_data != nullptr && expert_data->size() > 1 &&
      !split.experts.empty()) {
    expert_shards_.emplace(SizesOf(split.experts), expert_data->size());
  }
}

absl::Status Trainer::PlaceGradientSum() {
  if (!options_.overlap_grad_reduce || data_parallel_size() == 1) {
    return absl::OkStatus();
  }
  // The gradients the step updates, where they lie: the device's when
  // resident, else the host's (ValidateSetup leaves no other case).
  std::vector<Tensor*> grads;
  for (const TrainableTensor& p : StepTrainable()) grads.push_back(p.grad);
  absl::StatusOr<std::unique_ptr<OverlappedGradientSum>> sum =
      OverlappedGradientSum::Create(
          *data_parallel_views_.connected(), std::move(grads),
          resident() ? backend_->allocator() : nullptr,
          options_.gradient_bucket_elements);
  if (!sum.ok()) return sum.status();
  overlapped_sum_ = *std::move(sum);
  return absl::OkStatus();
}

LossOptions Trainer::StepLossOptions() const {
  // A step reads only the losses and expert loads of a forward pass, and
  // runs every forward's backward.
  LossOptions loss = options_.loss;
  loss.return_logits = false;
  loss.record_selections = false;
  loss.fuse_head_loss = true;
  return loss;
}

Trainer::Trainer(const TrainerOptions& options,
                 std::unique_ptr<TrainingData> data,
                 std::unique_ptr<ModelParameters> params,
                 std::unique_ptr<Backend> backend, Collectives* data_parallel)
    : options_(options),
      backend_(std::move(backend)),
      data_(std::move(data)),
      params_(std::move(params)),
      optimizer_(options.adamw),
      data_parallel_views_(data_parallel, backend_->allocator()),
      data_parallel_(data_parallel_views_.host()) {
  if (backend_->allocator() != nullptr) {
    device_params_ = MirrorParameters(*params_, backend_->allocator());
  }
}

ExpertSplit Trainer::SplitExperts(
    const std::vector<TrainableTensor>& trainable) const {
  return SplitRoutedExperts(OnDevice(trainable) ? *device_params_ : *params_,
                            trainable);
}

std::vector<Trainer::ShardedList> Trainer::ShardedLists(
    const std::vector<TrainableTensor>& trainable) const {
  const bool on_device = OnDevice(trainable);
  if (!expert_parallel_) {
    return {{data_parallel_views_.For(on_device), &*shards_, trainable}};
  }
  ExpertSplit split = SplitExperts(trainable);
  std::vector<ShardedList> lists = {
      {data_parallel_views_.For(on_device), &*shards_, std::move(split.dense)}};
  if (expert_shards_) {
    lists.push_back({expert_data_views_.For(on_device), &*expert_shards_,
                     std::move(split.experts)});
  }
  return lists;
}

std::vector<TrainableTensor> Trainer::UpdatedHere(
    const std::vector<TrainableTensor>& trainable) const {
  if (!shards_) return trainable;
  std::vector<TrainableTensor> updated;
  for (const ShardedList& list : ShardedLists(trainable)) {
    const int rank = list.group->rank();
    updated.insert(updated.end(),
                   list.tensors.begin() + list.shards->first(rank),
                   list.tensors.begin() + list.shards->end(rank));
  }
  // Experts without replicas are updated where they live.
  if (expert_parallel_ && !expert_shards_) {
    const ExpertSplit split = SplitExperts(trainable);
    updated.insert(updated.end(), split.experts.begin(), split.experts.end());
  }
  return updated;
}

absl::StatusOr<double> Trainer::GradSquaredSumOverShards(
    const std::vector<TrainableTensor>& updated) {
  // Each tensor counts once: on its owning pp rank (a LoRA rank's adapters
  // are all its own: CheckLoraUnderPipeline), split ones over the tensor
  // group, a distributed-optimizer shard over the data-parallel group, and a
  // routed expert over its expert-data and expert groups.
  const std::vector<TrainableTensor> owned =
      pipeline_tensors_ && !lora_
          ? SelectTrainable(updated, pipeline_tensors_->owned)
          : updated;
  ExpertSplit split;
  if (expert_parallel_) {
    split = SplitExperts(owned);
  } else {
    split.dense = owned;
  }
  absl::StatusOr<double> dense =
      token_parallel_ ? TokenParallelGradSquaredSum(
                            optimizer_backend(), *token_parallel_, split.dense)
                      : GradSquaredSum(optimizer_backend(), split.dense);
  if (dense.ok() && shards_) dense = SumInRankOrder(*data_parallel_, *dense);
  if (!dense.ok()) return dense.status();
  absl::StatusOr<double> experts =
      GradSquaredSum(optimizer_backend(), split.experts);
  if (expert_shards_) {
    experts = SumInRankOrder(*expert_parallel_->expert_data, *experts);
  }
  if (experts.ok() && expert_parallel_) {
    experts = SumInRankOrder(*expert_parallel_->experts, *experts);
  }
  if (!experts.ok()) return experts.status();
  if (!pipeline_) return *dense + *experts;
  return SumInRankOrder(*pipeline_->group, *dense + *experts);
}

absl::Status Trainer::CheckLoraUnderPipeline() {
  if (!lora_) return absl::OkStatus();
  const std::set<std::string> shared(pipeline_tensors_->shared.begin(),
                                     pipeline_tensors_->shared.end());
  for (const TrainableTensor& adapter : lora_->All()) {
    const std::string base =
        adapter.name.substr(0, adapter.name.rfind(".lora_")) + ".weight";
    if (shared.count(base) > 0) {
      return absl::UnimplementedError(absl::StrCat(
          "training.lora.target_modules: ", base,
          " is read on several pipeline stages; LoRA on it needs pp 1"));
    }
  }
  return absl::OkStatus();
}

std::vector<TrainableTensor> Trainer::StepTrainable() {
  return resident() ? DeviceTrained() : Trainable();
}

std::vector<TrainableTensor> Trainer::HostTrained() {
  return lora_ ? lora_->Trainable() : WithGradients(*params_);
}

std::vector<TrainableTensor> Trainer::DeviceTrained() {
  return lora_ ? device_lora_->Trainable() : WithGradients(*device_params_);
}

ModelParameters& Trainer::params() {
  if (resident()) SyncToHost();
  return *params_;
}

void Trainer::SyncMoments(bool to_host) {
  // All of a side's moments at once, of the tensors the device updates (a
  // ZeRO-1 shard): a resumed run's device moments are made here, in the two
  // flat buffers a step would make.
  const std::vector<AdamMoments*> host =
      optimizer_.MomentsOf(UpdatedHere(HostTrained()));
  const std::vector<AdamMoments*> device =
      device_optimizer_->MomentsOf(UpdatedHere(DeviceTrained()));
  for (size_t i = 0; i < host.size(); ++i) {
    AdamMoments& to = to_host ? *host[i] : *device[i];
    const AdamMoments& from = to_host ? *device[i] : *host[i];
    to.exp_avg.CopyFrom(from.exp_avg);
    to.exp_avg_sq.CopyFrom(from.exp_avg_sq);
  }
}

// With LoRA only the adapters train: they and their moments travel, the
// frozen weights stay where they are on either side.
void Trainer::SyncToHost() {
  if (lora_) {
    lora_->CopyValuesFrom(*device_lora_);
  } else {
    CopyValues(*device_params_, *params_);
  }
  SyncMoments(/*to_host=*/true);
  optimizer_.set_steps(device_optimizer_->steps());
}

void Trainer::SyncToDevice() {
  if (lora_) {
    device_lora_->CopyValuesFrom(*lora_);
  } else {
    CopyValues(*params_, *device_params_);
  }
  compute_copies_current_ = false;
  SyncMoments(/*to_host=*/false);
  device_optimizer_->set_steps(optimizer_.steps());
}

std::vector<TrainableTensor> Trainer::Trainable() {
  if (lora_) return lora_->Trainable();
  std::vector<TrainableTensor> trainable;
  for (const NamedTensor& named : params_->Named()) {
    if (named.grad == nullptr) continue;
    if (pipeline_tensors_ && pipeline_tensors_->used.count(named.name) == 0) {
      continue;
    }
    trainable.push_back({named.name, named.value, named.grad});
  }
  return trainable;
}

absl::Status Trainer::RunMicroBatches(MicroBatchTotals* totals) {
  const int64_t micro_batches =
      options_.global_batch_size / options_.micro_batch_size;
  const int dp = data_parallel_size();
  const int dp_rank = data_parallel_ == nullptr ? 0 : data_parallel_->rank();
  // Megatron's data-parallel sampler: each group of dp micro batches is
  // dealt out one per rank, so the ranks together read the samples one
  // process would.
  auto first_sample = [&](int64_t m) {
    return consumed_samples_ + (m * dp + dp_rank) * options_.micro_batch_size;
  };
  if (pipeline_) {
    std::vector<StageModel*> chunks;
    for (StageModel& stage : stages_) chunks.push_back(&stage);
    // The stages' hidden states and gradients stay where the backend
    // computes them.
    Allocator* memory = backend_->allocator();
    absl::StatusOr<StageLosses> losses = RunPipelineSchedule(
        chunks, pipeline_link_views_.For(memory != nullptr), memory,
        micro_batches / dp, [&](int64_t m) {
          return data_->MicroBatch(first_sample(m), options_.micro_batch_size);
        });
    if (!losses.ok()) return losses.status();
    *totals = *std::move(losses);
    return absl::OkStatus();
  }
  if (token_parallel_) {
    for (int64_t m = 0; m < micro_batches / dp; ++m) {
      if (absl::Status status =
              RunTokenParallelMicroBatch(first_sample(m), totals);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  // The losses and expert loads of every micro batch, read once at the end.
  if (step_totals_) {
    step_totals_->Reset();
  } else {
    step_totals_.emplace(backend_->allocator());
  }
  for (int64_t m = 0; m < micro_batches / dp; ++m) {
    if (absl::Status status = RunMicroBatch(
            first_sample(m), m + 1 == micro_batches / dp, &*step_totals_);
        !status.ok()) {
      return status;
    }
  }
  step_totals_->ReadInto(totals);
  return absl::OkStatus();
}

absl::Status Trainer::RunTokenParallelMicroBatch(int64_t first_sample,
                                                 MicroBatchTotals* totals) {
  StageModel& model = stages_.front();
  StageActivations acts;
  absl::StatusOr<StageLosses> losses =
      model.Forward(data_->MicroBatch(first_sample, options_.micro_batch_size),
                    Tensor(), &acts);
  if (!losses.ok()) return losses.status();
  Tensor no_input_gradient;
  if (absl::Status status = model.Backward(acts, Tensor(), &no_input_gradient);
      !status.ok()) {
    return status;
  }
  AddMicroBatch(*losses, totals);
  return absl::OkStatus();
}

absl::Status Trainer::ReduceTokenParallel(MicroBatchTotals* totals) {
  // Under expert parallelism a routed expert's gradient is complete on its
  // owner (the dispatcher brought it every token of the expert group); the
  // expert-data group sums its replicas.
  // The gradients where the step updates them: a resident rank's summed on
  // the device where they lie.
  const std::vector<TrainableTensor> trainable = StepTrainable();
  const std::vector<TrainableTensor> partial =
      expert_parallel_ ? SplitExperts(trainable).dense : trainable;
  const bool on_device = OnDevice(trainable);
  if (absl::Status status = SumTokenParallelGradients(
          *token_parallel_, tensor_views_.For(on_device),
          context_views_.For(on_device), partial);
      !status.ok()) {
    return status;
  }
  for (Collectives* group : {token_parallel_->context_host_group(),
                             token_parallel_->tensor_host_group()}) {
    if (group == nullptr) continue;
    if (absl::Status status = ReduceTotals(*group, totals); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::RunMicroBatch(int64_t first_sample, bool last,
                                    StepTotals* step) {
  if (absl::Status loaded = model_->Load(
          data_->MicroBatch(first_sample, options_.micro_batch_size));
      !loaded.ok()) {
    return loaded;
  }
  if (!last || overlapped_sum_ == nullptr) {
    if (recorded_) return recorded_->Run(*model_, step);
    return model_->TrainLoaded(step);
  }
  // Unrecorded: the buckets start from the host as the backward is queued.
  model_->set_gradients_finished([this](const std::vector<Tensor*>& grads) {
    overlapped_sum_->Finished(grads);
  });
  absl::Status status = model_->TrainLoaded(step);
  model_->set_gradients_finished(nullptr);
  // A failed pass leaves no bucket in flight for the next step.
  if (!status.ok()) overlapped_sum_->Finish().IgnoreError();
  return status;
}

// The model reports expert loads for the main decoder layers, then the MTP
// layers, in that order.
Tensor* Trainer::RouterBias(size_t layer) {
  ModelParameters& trained = resident() ? *device_params_ : *params_;
  const size_t main_layers = trained.layers.size();
  DecoderLayerParameters& decoder =
      layer < main_layers ? trained.layers[layer]
                          : trained.mtp[layer - main_layers].layer;
  return &decoder.moe.e_score_correction_bias;
}

void Trainer::UpdateRouterBiases(const MicroBatchTotals& totals) {
  if (options_.router_bias_update_rate == 0) return;
  for (size_t layer = 0; layer < totals.expert_load.size(); ++layer) {
    if (totals.expert_load[layer].empty()) continue;  // a dense layer
    // A pp rank holds only its stages' router biases.
    Tensor* bias = RouterBias(layer);
    if (bias->numel() == 0) continue;
    // A few floats: updated on the host wherever the bias lives.
    Tensor on_host = bias->CopyTo(nullptr);
    UpdateRouterBias(totals.expert_load[layer],
                     options_.router_bias_update_rate, &on_host);
    bias->CopyFrom(on_host);
  }
}

absl::Status Trainer::ReduceOver(Collectives& group, bool scatter_gradients,
                                 MicroBatchTotals* totals) {
  absl::Status status;
  if (overlapped_sum_) {
    // Started during the last backward (those it had not finished start now):
    // every rank's sums, of which ZeRO-1 updates its shard (its reduce-scatter
    // on an arena sums every span too).
    status = overlapped_sum_->Finish();
  } else if (scatter_gradients) {
    for (const ShardedList& list : ShardedLists(StepTrainable())) {
      status = list.shards->ReduceScatter(*list.group, GradsOf(list.tensors));
      if (!status.ok()) return status;
    }
  } else {
    // The gradients where the step updates them: a resident rank's summed on
    // the device where they lie (through host copies where the group's
    // buffers are the host's).
    const std::vector<TrainableTensor> trainable = StepTrainable();
    const bool on_device = OnDevice(trainable);
    Collectives& data_parallel = *data_parallel_views_.For(on_device);
    status = expert_parallel_
                 ? AllReduceExpertParallelGradients(
                       data_parallel, expert_data_views_.For(on_device),
                       SplitExperts(trainable))
                 : AllReduceGradients(data_parallel, trainable);
  }
  if (!status.ok()) {
    return status;
  }
  return ReduceTotals(group, totals);
}

absl::Status Trainer::ReduceTotals(Collectives& group,
                                   MicroBatchTotals* totals) {
  float losses[] = {static_cast<float>(totals->lm_loss),
                    static_cast<float>(totals->mtp_loss),
                    static_cast<float>(totals->indexer_loss)};
  if (absl::Status status = group.AllReduce(losses, 3, ReduceOp::kSum);
      !status.ok()) {
    return status;
  }
  totals->lm_loss = losses[0];
  totals->mtp_loss = losses[1];
  totals->indexer_loss = losses[2];
  std::vector<int64_t> loads;
  for (const std::vector<int64_t>& layer : totals->expert_load) {
    loads.insert(loads.end(), layer.begin(), layer.end());
  }
  if (absl::Status status = group.AllReduceSum(loads.data(), loads.size());
      !status.ok()) {
    return status;
  }
  auto next = loads.begin();
  for (std::vector<int64_t>& layer : totals->expert_load) {
    std::copy_n(next, layer.size(), layer.begin());
    next += layer.size();
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::StepMetrics> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  MicroBatchTotals totals;
  if (absl::Status status = ComputeGradients(&totals); !status.ok()) {
    return status;
  }
  if (absl::Status status = ReduceGradients(&totals); !status.ok()) {
    return status;
  }
  ++iteration_;
  consumed_samples_ += options_.global_batch_size;
  absl::StatusOr<double> grad_norm = UpdateWeights(totals);
  if (!grad_norm.ok()) return grad_norm.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return MetricsOf(totals, *grad_norm, seconds);
}

absl::Status Trainer::ComputeGradients(MicroBatchTotals* totals) {
  // The weights train where the model computes (the device's stay there).
  compute_params()->ZeroGrad();
  if (lora_) trained_lora().Merge(optimizer_backend());
  // Merged weights or a load need fresh compute copies; the device
  // optimizer's steps write them as they update the weights
  // (Backend::AdamWStep).
  if (device_params_ && !compute_copies_current_) {
    RefreshComputeCopies(*backend_, *device_params_);
    compute_copies_current_ = !lora_;
  }
  if (absl::Status status = RunMicroBatches(totals); !status.ok()) {
    return status;
  }
  // Adapter gradients are linear in the weight gradients, so they can be
  // formed before the data-parallel sum (which then moves less data).
  if (lora_) trained_lora().AdapterGradients(optimizer_backend());
  return absl::OkStatus();
}

absl::Status Trainer::ReduceGradients(MicroBatchTotals* totals) {
  // Tensor and context ranks hold their tokens' part of everything.
  if (token_parallel_) {
    if (absl::Status status = ReduceTokenParallel(totals); !status.ok()) {
      return status;
    }
  }
  // The stages' parts add up to the whole model's gradients (only tensors
  // read on several pp ranks need a sum) and losses; then the data-parallel
  // ranks sum theirs.
  if (pipeline_) {
    // Where the step updates them: a resident rank's on the device.
    const std::vector<TrainableTensor> trainable = StepTrainable();
    if (absl::Status status = SumSharedGradients(
            optimizer_backend(), *pipeline_views_.For(OnDevice(trainable)),
            *pipeline_tensors_, trainable);
        !status.ok()) {
      return status;
    }
    if (absl::Status status = ReduceTotals(*pipeline_->group, totals);
        !status.ok()) {
      return status;
    }
  }
  if (data_parallel_ == nullptr) return absl::OkStatus();
  return ReduceOver(*data_parallel_, shards_.has_value(), totals);
}

absl::StatusOr<double> Trainer::UpdateWeights(const MicroBatchTotals& totals) {
  // Each micro batch's loss is a mean over its tokens; the step's loss is the
  // mean over micro batches, so the summed gradients are scaled by 1/M.
  const int64_t micro_batches = MicroBatchesPerStep();
  const std::vector<TrainableTensor> trainable = StepTrainable();
  const std::vector<TrainableTensor> updated = UpdatedHere(trainable);
  absl::StatusOr<double> squared = GradSquaredSumOverShards(updated);
  if (!squared.ok()) return squared.status();
  const double grad_norm = GlobalNorm(*squared) / micro_batches;
  if (!std::isfinite(grad_norm)) {
    ++skipped_iterations_;
    ++nan_iterations_;
    return grad_norm;
  }
  const double scale = ClipScale(grad_norm, options_.clip_grad) / micro_batches;
  step_optimizer().Step(optimizer_backend(), updated,
                        options_.schedule.At(iteration_), scale);
  for (const ShardedList& list :
       shards_ ? ShardedLists(trainable) : std::vector<ShardedList>()) {
    if (absl::Status status =
            list.shards->AllGather(*list.group, ValuesOf(list.tensors));
        !status.ok()) {
      return status;
    }
  }
  // The device optimizer wrote the compute copies of its own shard only.
  if (shards_ && resident()) compute_copies_current_ = false;
  if (!lora_) UpdateRouterBiases(totals);
  return grad_norm;
}

v1::StepMetrics Trainer::MetricsOf(const MicroBatchTotals& totals,
                                   double grad_norm, double seconds) const {
  const int64_t micro_batches = MicroBatchesPerStep();
  const int devices =
      data_parallel_size() * (pipeline_ ? pipeline_->group->size() : 1) *
      (token_parallel_ ? token_parallel_->tp() * token_parallel_->cp() : 1);
  v1::StepMetrics metrics;
  metrics.set_iteration(iteration_);
  metrics.set_train_iters(options_.train_iters);
  metrics.set_consumed_samples(consumed_samples_);
  metrics.set_step_time_ms(seconds * 1e3);
  metrics.set_tflops_per_device(TrainingFlops(options_.model,
                                              options_.seq_length,
                                              options_.global_batch_size) /
                                seconds / 1e12 / devices);
  metrics.set_tokens_per_sec_per_device(
      static_cast<double>(options_.global_batch_size * options_.seq_length) /
      seconds / devices);
  metrics.set_learning_rate(options_.schedule.At(iteration_));
  metrics.set_lm_loss(totals.lm_loss / micro_batches);
  metrics.set_mtp_loss(totals.mtp_loss / micro_batches);
  metrics.set_indexer_loss(totals.indexer_loss / micro_batches);
  metrics.set_grad_norm(grad_norm);
  metrics.set_skipped_iterations(skipped_iterations_);
  metrics.set_nan_iterations(nan_iterations_);
  // The device's allocator on a GPU; the process's resident peak on the CPU.
  metrics.set_peak_memory_bytes(backend_->allocator() != nullptr
                                    ? backend_->allocator()->peak_bytes()
                                    : PeakResidentBytes());
  for (const std::vector<int64_t>& load : totals.expert_load) {
    if (!load.empty()) metrics.add_expert_load_imbalance(LoadImbalance(load));
  }
  return metrics;
}

}  // namespace glm
