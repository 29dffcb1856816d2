// One rank's training loop: gradient accumulation over micro batches, AdamW
// with global-norm clipping, the LR schedule, NaN/Inf iterations skipped and
// counted, aux-loss-free router bias updates, and the per-step metrics
// Megatron logs. Whatever the parallelism, every rank takes the step one
// process would:
// - data parallel: each rank runs its share of the micro batches and the
//   ranks sum gradients, losses and expert loads (ZeRO-1 optionally);
// - pipeline parallel (PipelineRank): the rank runs its stages on Megatron's
//   schedule and trains only their tensors;
// - expert parallel (ExpertParallelRank): the routed experts are split;
// - tensor and context parallel (TokenParallelRank): the ranks split each
//   micro batch's tokens, and tensor ranks heads and MLP columns.
// A rank allocates only its share of the weights (parallel/rank_tensors.h).
#ifndef GLM_TRAINING_TRAINER_H_
#define GLM_TRAINING_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/training_state.h"
#include "collectives/collectives.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/config.h"
#include "model/glm_model.h"
#include "model/parameters.h"
#include "model/token_parallel.h"
#include "parallel/expert_parallel_dispatch.h"
#include "parallel/pipeline_edges.h"
#include "parallel/pipeline_layout.h"
#include "parallel/rank_tensors.h"
#include "parallel/stage_model.h"
#include "parallel/stage_parameters.h"
#include "parallel/staged_collectives.h"
#include "proto/metrics.pb.h"
#include "training/adamw.h"
#include "training/distributed_optimizer.h"
#include "training/expert_gradients.h"
#include "training/lora.h"
#include "training/lr_schedule.h"
#include "training/overlapped_gradient_sum.h"
#include "training/recorded_micro_batches.h"
#include "training/training_data.h"

namespace glm {

struct TrainerOptions {
  ModelConfig model;
  int64_t train_iters = 0;
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t seq_length = 0;
  LrSchedule schedule;
  AdamWOptions adamw;
  double clip_grad = 1.0;
  LossOptions loss;
  double router_bias_update_rate = 0;
  // ZeRO-1 over the data-parallel group (Megatron's
  // --use-distributed-optimizer): see training/distributed_optimizer.h.
  bool distributed_optimizer = false;
  // Weight initialization when no weights are given. Training itself draws no
  // random numbers (no dropout), so the seed is the whole random state.
  uint64_t seed = 0;
  // Set: train LoRA adapters only; the base weights and router biases stay
  // frozen.
  std::optional<LoraOptions> lora;
  // Record each micro batch's forward and backward once per shape and replay
  // it (a CUDA graph on a GPU; training/recorded_micro_batches.h). One model
  // per rank: not with pipeline, tensor, context or expert parallelism.
  bool record_micro_batches = false;
  // Sum the gradients over the data-parallel group in buckets started
  // during the step's last backward (Megatron's --overlap-grad-reduce;
  // training/overlapped_gradient_sum.h). Data parallelism (with ZeRO-1 or
  // not) without pipeline, expert, tensor or context parallelism or LoRA.
  // The step's last micro batch then runs unrecorded.
  bool overlap_grad_reduce = false;
  int64_t gradient_bucket_elements = kDefaultGradientBucketElements;
};

// This rank's pipeline stages (one per virtual chunk, in chunk order), the
// pipeline group (its collectives, and the sums of shared tensors'
// gradients) and the links its hidden states and their gradients travel
// (parallel/pipeline_edges.h), when pp > 1. Not owned.
struct PipelineRank {
  Collectives* group = nullptr;
  PipelineLinks links;
  std::vector<StageSlice> stages;
  // Every stage of the layout: which tensors this rank shares with others.
  std::vector<StageSlice> plan;
};

// This rank's expert-parallel groups when ep > 1 (Megatron's expert grid
// folded over data parallelism). Not owned. Routed experts are split over
// `experts` (see parallel/expert_parallel_dispatch.h); `expert_data` holds
// the replicas of this rank's experts (null: none).
struct ExpertParallelRank {
  Collectives* experts = nullptr;
  Collectives* expert_data = nullptr;
};

// This rank's tensor- and context-parallel groups (null: size 1) when tp or
// cp > 1: the ranks of both groups read the same micro batches and split
// their tokens (model/token_parallel.h). Not owned.
struct TokenParallelRank {
  Collectives* tensor = nullptr;
  Collectives* context = nullptr;
};

// What a rank with these groups holds of the model (parallel/
// rank_tensors.h).
RankShare RankShareOf(const std::optional<PipelineRank>& pipeline,
                      const std::optional<ExpertParallelRank>& expert_parallel,
                      const std::optional<TokenParallelRank>& token_parallel);

class Trainer {
 public:
  // `params` may be null: this rank's share of the weights (RankShareOf) is
  // then allocated and initialized from options.seed. Given weights may be
  // whole or already the rank's share.
  // `data_parallel` (not owned, may be null: one rank) is the data-parallel
  // group; its size must divide the number of micro batches per step.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainerOptions& options, std::unique_ptr<TrainingData> data,
      std::unique_ptr<ModelParameters> params, std::unique_ptr<Backend> backend,
      Collectives* data_parallel = nullptr,
      std::optional<PipelineRank> pipeline = std::nullopt,
      std::optional<ExpertParallelRank> expert_parallel = std::nullopt,
      std::optional<TokenParallelRank> token_parallel = std::nullopt);

  // Runs the next iteration and returns its metrics.
  absl::StatusOr<v1::StepMetrics> Step();

  int64_t iteration() const { return iteration_; }
  // The data-parallel gradient sum that runs during the last backward
  // (TrainerOptions::overlap_grad_reduce); null when it runs after.
  const OverlappedGradientSum* overlapped_sum() const {
    return overlapped_sum_.get();
  }
  bool Done() const { return iteration_ >= options_.train_iters; }
  // Whether the weights and AdamW (with LoRA: the adapters' too) live where
  // the model computes, a device backend's memory: a step then copies no
  // weights or gradients between the host and the device.
  bool trains_on_device() const { return resident(); }
  const TrainerOptions& options() const { return options_; }
  // The current weights (brought to the host first when they train on a
  // device).
  ModelParameters& params();

  // Views of everything a checkpoint holds; the tensors stay owned by the
  // trainer. With LoRA the model part is the adapters only. Under tensor
  // parallelism split tensors appear whole (as GatherCheckpointState last
  // gathered them; Restore takes this rank's parts of loaded ones).
  TrainingState State();
  // Brings what State() shows onto every rank: the distributed optimizer's
  // AdamW moments from all data-parallel ranks, and under tensor parallelism
  // the whole split tensors and their moments. A no-op otherwise.
  absl::Status GatherCheckpointState();
  // Frees what a checkpoint's save or load brought beyond this rank's share:
  // the AdamW moments another data-parallel rank updates (ZeRO-1) and the
  // whole tensor-parallel tensors. Call on every rank after a save or load.
  void ReleaseCheckpointState();
  // The model's weights with the LoRA adapters merged, as the HF export needs
  // them: the tensors this rank holds, split ones whole (gathered from the
  // tensor ranks, so every rank calls it). The tensors stay owned by the
  // trainer.
  absl::StatusOr<TrainingState> MergedModelState();
  // After a checkpoint was loaded into State()'s tensors, restores the scalars
  // (and this rank's parts of split tensors).
  absl::Status Restore(const TrainingState& state);

 private:
  // Create's checks of the setup before anything is allocated.
  static absl::Status ValidateSetup(
      const TrainerOptions& options, const TrainingData& data,
      Collectives* data_parallel, const std::optional<PipelineRank>& pipeline,
      const std::optional<ExpertParallelRank>& expert_parallel,
      const std::optional<TokenParallelRank>& token_parallel);
  // This rank's share of the weights: `params` cut to `held`, or (null)
  // allocated and initialized from options.seed.
  static absl::StatusOr<std::unique_ptr<ModelParameters>> RankParameters(
      const TrainerOptions& options, std::unique_ptr<ModelParameters> params,
      const HeldTensors& held);
  // Builds the one model driver this rank runs: the whole model, or its
  // pipeline stages (or the whole model as one stage under tensor or context
  // parallelism).
  absl::Status BuildModel(
      std::optional<PipelineRank> pipeline,
      const std::optional<ExpertParallelRank>& expert_parallel,
      const std::optional<TokenParallelRank>& token_parallel);
  // Where the optimizer runs: on the device (one rank, no LoRA), or on the
  // host, sharded under the distributed optimizer.
  void PlaceOptimizer();
  // Under TrainerOptions::overlap_grad_reduce with data-parallel ranks: the
  // bucketed sum of the gradients a step updates.
  absl::Status PlaceGradientSum();
  LossOptions StepLossOptions() const;

  Trainer(const TrainerOptions& options, std::unique_ptr<TrainingData> data,
          std::unique_ptr<ModelParameters> params,
          std::unique_ptr<Backend> backend, Collectives* data_parallel);

  // What the micro batches of a step add up to (a pipeline stage adds its
  // own part; the pipeline group sums the parts).
  using MicroBatchTotals = StageLosses;
  // A step: this rank's gradients of its micro batches; their sums over the
  // parallel groups; the clipped AdamW update (returns the gradient norm, not
  // finite for a skipped iteration); the metrics line.
  absl::Status ComputeGradients(MicroBatchTotals* totals);
  absl::Status ReduceGradients(MicroBatchTotals* totals);
  absl::StatusOr<double> UpdateWeights(const MicroBatchTotals& totals);
  v1::StepMetrics MetricsOf(const MicroBatchTotals& totals, double grad_norm,
                            double seconds) const;
  int64_t MicroBatchesPerStep() const {
    return options_.global_batch_size / options_.micro_batch_size;
  }
  // This rank's micro batches of the step: all of them through the whole
  // model, or through its pipeline stages on Megatron's schedule.
  absl::Status RunMicroBatches(MicroBatchTotals* totals);
  // One micro batch's forward and backward, its losses and expert loads
  // added to `step`; the step's last (`last`) starts the overlapped
  // gradient sum's buckets as its backward finishes them.
  absl::Status RunMicroBatch(int64_t first_sample, bool last, StepTotals* step);
  // Under tensor or context parallelism: the whole model as one stage on
  // this rank's tokens.
  absl::Status RunTokenParallelMicroBatch(int64_t first_sample,
                                          MicroBatchTotals* totals);
  // Sums this rank's token share of gradients, losses and loads over the
  // tensor and context groups.
  absl::Status ReduceTokenParallel(MicroBatchTotals* totals);
  // Under tensor parallelism: the whole tensor State() shows for a split one
  // (allocated on first use), keyed by its checkpoint name.
  Tensor* WholeTensor(const std::string& key, const std::string& param,
                      const Tensor& part);
  absl::Status GatherWholeTensors();
  // LoRA under pipeline parallelism: every rank receives every adapter and
  // its moments from the rank that trains it.
  absl::Status GatherLoraAdapters();
  // UNIMPLEMENTED when a LoRA target is read on several pp ranks.
  absl::Status CheckLoraUnderPipeline();
  // What State() shows for `part`: its whole tensor when split, else itself.
  Tensor* Shown(const std::string& key, const std::string& param, Tensor* part);
  std::vector<TrainableTensor> Trainable();
  // What a checkpoint holds besides the model: the trainable tensors, or with
  // LoRA every adapter (a pp rank trains only its stages').
  std::vector<TrainableTensor> Checkpointed();
  // The host optimizer's moments of `params` for a checkpoint. Moments made
  // here for the first time are made for this rank's updated tensors first,
  // together as a step makes them, and for the others (ZeRO-1: other ranks'
  // shards) apart, so that ReleaseCheckpointState frees theirs whole.
  std::vector<AdamMoments*> CheckpointMoments(
      const std::vector<TrainableTensor>& params);
  // Checkpointed(), each tensor with its CheckpointMoments.
  std::vector<std::pair<TrainableTensor, AdamMoments*>>
  CheckpointedWithMoments();
  Tensor* RouterBias(size_t layer);
  void UpdateRouterBiases(const MicroBatchTotals& totals);
  // Sums gradients (all of them, or only this rank's shard when
  // `scatter_gradients`), losses and expert loads over `group`.
  absl::Status ReduceOver(Collectives& group, bool scatter_gradients,
                          MicroBatchTotals* totals);
  // Sums losses and expert loads over `group`.
  absl::Status ReduceTotals(Collectives& group, MicroBatchTotals* totals);
  // The tensors this rank updates: all, or its distributed-optimizer shard.
  std::vector<TrainableTensor> UpdatedHere(
      const std::vector<TrainableTensor>& trainable) const;
  // The distributed optimizer's sharded lists of `trainable`, each with its
  // group and shards.
  struct ShardedList {
    Collectives* group;
    const ParameterShards* shards;
    std::vector<TrainableTensor> tensors;
  };
  std::vector<ShardedList> ShardedLists(
      const std::vector<TrainableTensor>& trainable) const;
  // Squared gradient norm over every rank's updated tensors.
  absl::StatusOr<double> GradSquaredSumOverShards(
      const std::vector<TrainableTensor>& updated);
  int data_parallel_size() const {
    return data_parallel_ == nullptr ? 1 : data_parallel_->size();
  }

  TrainerOptions options_;
  // First, so they are destroyed last: every tensor below may live in the
  // backend's allocator.
  CpuBackend host_backend_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<TrainingData> data_;
  // The fp32 weights, gradients the optimizer reads, and everything the
  // checkpoints and collectives see, in host memory.
  std::unique_ptr<ModelParameters> params_;
  // On a device backend: the copy the model computes on, where the weights
  // stay (resident): the device optimizer updates them (every collective of
  // the step runs on the device's tensors) and params_ / optimizer_ are their
  // host copy for checkpoints (SyncToHost before a save or export,
  // SyncToDevice after a load). With LoRA the device merges and trains
  // device_lora_, whose host copy is lora_.
  std::unique_ptr<ModelParameters> device_params_;
  std::optional<AdamW> device_optimizer_;
  bool resident() const { return device_optimizer_.has_value(); }
  // Whether the backend's compute copies of device_params_ match its values
  // (Backend::RefreshComputeCopies): kept by the device optimizer's steps,
  // lost when anything else writes the values.
  bool compute_copies_current_ = false;
  ModelParameters* compute_params() {
    return device_params_ ? device_params_.get() : params_.get();
  }
  // What a step updates, and the optimizer and backend that update it: the
  // device's when resident, else the host's.
  std::vector<TrainableTensor> StepTrainable();
  AdamW& step_optimizer() {
    return resident() ? *device_optimizer_ : optimizer_;
  }
  Backend& optimizer_backend() {
    return resident() ? *backend_ : host_backend_;
  }
  void SyncToHost();
  void SyncToDevice();
  void SyncMoments(bool to_host);
  std::unique_ptr<GlmModel> model_;
  // What a step's micro batches add up on the backend, kept from step to
  // step (recorded micro batches add to its memory); then the recordings.
  std::optional<StepTotals> step_totals_;
  std::optional<RecordedMicroBatches> recorded_;
  AdamW optimizer_;
  // The data-parallel group as connected (its buffers on the device for
  // NCCL), and as the host's and the device's buffers reach it: the resident
  // weights' gradients and ZeRO-1 shards go to the device view (the
  // overlapped sum to the group as connected), everything the host holds to
  // the host view, data_parallel_.
  GroupViews data_parallel_views_;
  Collectives* data_parallel_;
  // Under expert parallelism the expert groups likewise (expert_parallel_
  // holds their host views; the dispatcher the groups as connected).
  GroupViews experts_views_, expert_data_views_;
  // The tensor- and context-parallel groups likewise: the model's gathers
  // and reductions take the view for its backend's memory, the sums of
  // gradients and losses the host view (token_parallel_ holds both).
  GroupViews tensor_views_, context_views_;
  // The pipeline group likewise, for the sums of the gradients of tensors
  // several stages read; and its links, which carry the stages' tensors
  // where the backend keeps them.
  GroupViews pipeline_views_;
  PipelineLinkViews pipeline_link_views_;
  // Whether `tensors` are the device model's (a host backend's model may lie
  // in memory of its own, which the host views read).
  bool OnDevice(const std::vector<TrainableTensor>& tensors) const {
    return device_params_ != nullptr && !tensors.empty() &&
           !tensors[0].value->on_host();
  }
  // SplitRoutedExperts of the model `trainable` belongs to.
  ExpertSplit SplitExperts(const std::vector<TrainableTensor>& trainable) const;
  // With the distributed optimizer: shards of the trainable tensors over the
  // data-parallel group (under expert parallelism of the dense ones, and of
  // the routed experts over the expert-data-parallel group when it has more
  // than one rank; otherwise a rank updates all of its experts).
  std::optional<ParameterShards> shards_;
  std::optional<ParameterShards> expert_shards_;
  // Under TrainerOptions::overlap_grad_reduce (PlaceGradientSum).
  std::unique_ptr<OverlappedGradientSum> overlapped_sum_;
  std::optional<PipelineRank> pipeline_;
  // With pipeline parallelism a rank keeps current, sums and updates only
  // the tensors its stages read.
  std::optional<PipelineTensors> pipeline_tensors_;
  std::vector<StageModel> stages_;  // with pipeline parallelism
  std::optional<LoraAdapters> lora_;
  std::optional<LoraAdapters> device_lora_;  // lora_ on device_params_
  // The adapters a step merges and trains: the device's when resident.
  LoraAdapters& trained_lora() { return device_lora_ ? *device_lora_ : *lora_; }
  // What the host's and the device's optimizer update (before sharding).
  std::vector<TrainableTensor> HostTrained();
  std::vector<TrainableTensor> DeviceTrained();
  std::optional<ExpertParallelRank> expert_parallel_;
  std::unique_ptr<ExpertParallelDispatcher> expert_dispatcher_;
  std::unique_ptr<TokenParallel> token_parallel_;
  std::map<std::string, Tensor> whole_tensors_;  // see WholeTensor

  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t skipped_iterations_ = 0;
  int64_t nan_iterations_ = 0;
};

}  // namespace glm

#endif  // GLM_TRAINING_TRAINER_H_
