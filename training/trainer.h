// One rank's training loop for a whole model (no model parallelism): gradient
// accumulation over micro batches, AdamW with global-norm clipping, the LR
// schedule, NaN/Inf iterations skipped and counted, aux-loss-free router bias
// updates, and the per-step metrics Megatron logs. With a data-parallel group
// each rank runs its share of the micro batches and the ranks sum gradients,
// losses and expert loads before the update, so every rank takes the step one
// process would. With expert parallelism the ranks of the data-parallel group
// also split the routed experts (ExpertParallelRank).
#ifndef GLM_TRAINING_TRAINER_H_
#define GLM_TRAINING_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/training_state.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/glm_model.h"
#include "model/parameters.h"
#include "parallel/collectives.h"
#include "parallel/expert_parallel_dispatch.h"
#include "parallel/pipeline_layout.h"
#include "parallel/stage_model.h"
#include "parallel/stage_parameters.h"
#include "proto/metrics.pb.h"
#include "training/adamw.h"
#include "training/distributed_optimizer.h"
#include "training/lora.h"
#include "training/lr_schedule.h"
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
};

// This rank's pipeline stages (one per virtual chunk, in chunk order) and
// the pipeline group twice, for the forward and the backward direction, when
// pp > 1. Not owned.
struct PipelineRank {
  Collectives* forward = nullptr;
  Collectives* backward = nullptr;
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

class Trainer {
 public:
  // `params` may be null: weights are then initialized from options.seed.
  // `data_parallel` (not owned, may be null: one rank) is the data-parallel
  // group; its size must divide the number of micro batches per step.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainerOptions& options, std::unique_ptr<TrainingData> data,
      std::unique_ptr<ModelParameters> params, std::unique_ptr<Backend> backend,
      Collectives* data_parallel = nullptr,
      std::optional<PipelineRank> pipeline = std::nullopt,
      std::optional<ExpertParallelRank> expert_parallel = std::nullopt);

  // Runs the next iteration and returns its metrics.
  absl::StatusOr<v1::StepMetrics> Step();

  int64_t iteration() const { return iteration_; }
  bool Done() const { return iteration_ >= options_.train_iters; }
  const TrainerOptions& options() const { return options_; }
  ModelParameters& params() { return *params_; }

  // Views of everything a checkpoint holds; the tensors stay owned by the
  // trainer. With LoRA the model part is the adapters only.
  TrainingState State();
  // Distributed optimizer only (otherwise a no-op): copies every rank's AdamW
  // moments to all data-parallel ranks, so that State() is complete on each.
  absl::Status GatherOptimizerState();
  // The adapters merged into the base weights, as the model runs them (LoRA).
  void MergeAdapters();
  // After a checkpoint was loaded into State()'s tensors, restores the scalars.
  absl::Status Restore(const TrainingState& state);

 private:
  Trainer(const TrainerOptions& options, std::unique_ptr<TrainingData> data,
          std::unique_ptr<ModelParameters> params,
          std::unique_ptr<Backend> backend, Collectives* data_parallel);

  // What the micro batches of a step add up to (a pipeline stage adds its
  // own part; the pipeline group sums the parts).
  using MicroBatchTotals = StageLosses;
  // This rank's micro batches of the step: all of them through the whole
  // model, or through its pipeline stages on Megatron's schedule.
  absl::Status RunMicroBatches(MicroBatchTotals* totals);
  absl::Status RunMicroBatch(int64_t first_sample, MicroBatchTotals* totals);
  std::vector<TrainableTensor> Trainable();
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
  // Squared gradient norm over every rank's updated tensors.
  absl::StatusOr<double> GradSquaredSumOverShards(
      const std::vector<TrainableTensor>& updated);
  int data_parallel_size() const {
    return data_parallel_ == nullptr ? 1 : data_parallel_->size();
  }

  TrainerOptions options_;
  std::unique_ptr<TrainingData> data_;
  std::unique_ptr<ModelParameters> params_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GlmModel> model_;
  AdamW optimizer_;
  Collectives* data_parallel_;
  std::optional<ParameterShards> shards_;  // with the distributed optimizer
  std::optional<PipelineRank> pipeline_;
  // With pipeline parallelism a rank keeps current, sums and updates only
  // the tensors its stages read.
  std::optional<PipelineTensors> pipeline_tensors_;
  std::vector<StageModel> stages_;  // with pipeline parallelism
  std::optional<LoraAdapters> lora_;
  std::optional<ExpertParallelRank> expert_parallel_;
  std::unique_ptr<ExpertParallelDispatcher> expert_dispatcher_;

  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t skipped_iterations_ = 0;
  int64_t nan_iterations_ = 0;
};

}  // namespace glm

#endif  // GLM_TRAINING_TRAINER_H_
