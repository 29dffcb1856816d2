// The checkpoint side of the trainer: what State() shows (whole tensors under
// tensor parallelism, every adapter under LoRA), gathering it onto every rank
// before a save, and taking each rank's part back after a load.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/tensor_parallel_shard.h"
#include "training/gradient_sync.h"
#include "training/token_parallel_gradients.h"
#include "training/trainer.h"

namespace glm {
namespace {

// A parameter's value, then its AdamW moments, under their checkpoint names.
std::vector<std::pair<std::string, Tensor*>> CheckpointTensorsOf(
    const TrainableTensor& param, AdamMoments& moments) {
  return {{param.name, param.value},
          {"exp_avg/" + param.name, &moments.exp_avg},
          {"exp_avg_sq/" + param.name, &moments.exp_avg_sq}};
}

}  // namespace

absl::Status Trainer::GatherCheckpointState() {
  if (resident()) SyncToHost();
  for (const ShardedList& list :
       shards_ ? ShardedLists(Trainable()) : std::vector<ShardedList>()) {
    std::vector<Tensor*> exp_avg, exp_avg_sq;
    for (AdamMoments* moments : CheckpointMoments(list.tensors)) {
      exp_avg.push_back(&moments->exp_avg);
      exp_avg_sq.push_back(&moments->exp_avg_sq);
    }
    for (const std::vector<Tensor*>* moments : {&exp_avg, &exp_avg_sq}) {
      if (absl::Status status = list.shards->AllGather(*list.group, *moments);
          !status.ok()) {
        return status;
      }
    }
  }
  if (absl::Status status = GatherLoraAdapters(); !status.ok()) return status;
  return GatherWholeTensors();
}

void Trainer::ReleaseCheckpointState() {
  whole_tensors_.clear();
  if (!shards_) return;
  std::set<std::string> kept;
  for (const TrainableTensor& param : UpdatedHere(Trainable())) {
    kept.insert(param.name);
  }
  optimizer_.ReleaseMomentsExcept(kept);
}

absl::Status Trainer::GatherLoraAdapters() {
  if (!lora_ || !pipeline_) return absl::OkStatus();
  // Each adapter (and its moments) is current on the pp rank that trains it;
  // the others add zeros.
  std::set<const Tensor*> trained;
  for (const TrainableTensor& adapter : lora_->Trainable()) {
    trained.insert(adapter.value);
  }
  std::vector<Tensor*> tensors;
  for (const auto& [adapter, moments] : CheckpointedWithMoments()) {
    for (const auto& [key, tensor] : CheckpointTensorsOf(adapter, *moments)) {
      if (trained.count(adapter.value) == 0) tensor->SetZero();
      tensors.push_back(tensor);
    }
  }
  // Packed: another pp rank may hold the moments of these adapters in other
  // arenas, or none.
  return AllReducePacked(*pipeline_->group, tensors);
}

Tensor* Trainer::WholeTensor(const std::string& key, const std::string& param,
                             const Tensor& part) {
  auto it = whole_tensors_.find(key);
  if (it == whole_tensors_.end()) {
    std::vector<int64_t> shape = part.shape();
    shape[TensorParallelDim(param)] *= token_parallel_->tp();
    it = whole_tensors_.emplace(key, Tensor(shape)).first;
  }
  return &it->second;
}

Tensor* Trainer::Shown(const std::string& key, const std::string& param,
                       Tensor* part) {
  if (!token_parallel_ || token_parallel_->tp() == 1 ||
      TensorParallelDim(param) < 0) {
    return part;
  }
  return WholeTensor(key, param, *part);
}

std::vector<TrainableTensor> Trainer::Checkpointed() {
  return lora_ ? lora_->All() : Trainable();
}

std::vector<AdamMoments*> Trainer::CheckpointMoments(
    const std::vector<TrainableTensor>& params) {
  optimizer_.MomentsOf(UpdatedHere(Trainable()));
  return optimizer_.MomentsOf(params);
}

std::vector<std::pair<TrainableTensor, AdamMoments*>>
Trainer::CheckpointedWithMoments() {
  const std::vector<TrainableTensor> params = Checkpointed();
  const std::vector<AdamMoments*> moments = CheckpointMoments(params);
  std::vector<std::pair<TrainableTensor, AdamMoments*>> pairs;
  for (size_t i = 0; i < params.size(); ++i) {
    pairs.emplace_back(params[i], moments[i]);
  }
  return pairs;
}

absl::Status Trainer::GatherWholeTensors() {
  if (!token_parallel_ || token_parallel_->tp() == 1) return absl::OkStatus();
  for (const auto& [param, moments] : CheckpointedWithMoments()) {
    if (TensorParallelDim(param.name) < 0) continue;
    for (const auto& [key, part] : CheckpointTensorsOf(param, *moments)) {
      absl::StatusOr<Tensor> whole =
          GatherTensorParallel(*token_parallel_, param.name, *part);
      if (!whole.ok()) return whole.status();
      *WholeTensor(key, param.name, *part) = *std::move(whole);
    }
  }
  return absl::OkStatus();
}

TrainingState Trainer::State() {
  TrainingState state;
  if (lora_) {
    for (const TrainableTensor& adapter : lora_->All()) {
      state.model.push_back(
          {adapter.name, Shown(adapter.name, adapter.name, adapter.value)});
    }
  } else {
    for (const NamedTensor& named : params_->Named()) {
      // A pp rank holds only its stages' tensors.
      if (pipeline_tensors_ && pipeline_tensors_->used.count(named.name) == 0) {
        continue;
      }
      state.model.push_back(
          {named.name, Shown(named.name, named.name, named.value)});
    }
  }
  // LoRA: every adapter's moments (a pp rank gathers them first).
  for (const auto& [param, moments] : CheckpointedWithMoments()) {
    const auto tensors = CheckpointTensorsOf(param, *moments);
    for (size_t i = 1; i < tensors.size(); ++i) {  // the moments
      const auto& [key, part] = tensors[i];
      state.optimizer.push_back({key, Shown(key, param.name, part)});
    }
  }
  state.optimizer_steps = optimizer_.steps();
  state.iteration = iteration_;
  state.consumed_samples = consumed_samples_;
  state.skipped_iterations = skipped_iterations_;
  state.nan_iterations = nan_iterations_;
  state.rng_seed = options_.seed;
  return state;
}

absl::StatusOr<TrainingState> Trainer::MergedModelState() {
  if (resident()) SyncToHost();
  // The host's weights take the adapters as they are now.
  if (lora_) lora_->Merge(host_backend_);
  TrainingState merged;
  for (const NamedTensor& named : params_->Named()) {
    if (named.value->numel() == 0) continue;  // another rank's
    Tensor* shown = named.value;
    if (token_parallel_ && token_parallel_->tp() > 1 &&
        TensorParallelDim(named.name) >= 0) {
      absl::StatusOr<Tensor> whole =
          GatherTensorParallel(*token_parallel_, named.name, *named.value);
      if (!whole.ok()) return whole.status();
      shown = WholeTensor(named.name, named.name, *named.value);
      *shown = *std::move(whole);
    }
    merged.model.push_back({named.name, shown});
  }
  merged.iteration = iteration_;
  merged.consumed_samples = consumed_samples_;
  return merged;
}

absl::Status Trainer::Restore(const TrainingState& state) {
  if (state.iteration < 0 || state.iteration > options_.train_iters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint iteration ", state.iteration,
        " is outside [0, train_iters=", options_.train_iters, "]"));
  }
  if (state.consumed_samples != state.iteration * options_.global_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint consumed_samples ", state.consumed_samples,
                     " does not match iteration ", state.iteration,
                     " x global_batch_size ", options_.global_batch_size));
  }
  iteration_ = state.iteration;
  consumed_samples_ = state.consumed_samples;
  skipped_iterations_ = state.skipped_iterations;
  nan_iterations_ = state.nan_iterations;
  optimizer_.set_steps(state.optimizer_steps);
  // This rank's parts of the whole tensors the checkpoint held, then (for a
  // model trained on the device) everything to the device.
  if (token_parallel_ && token_parallel_->tp() > 1) {
    for (const auto& [param, moments] : CheckpointedWithMoments()) {
      if (TensorParallelDim(param.name) < 0) continue;
      for (const auto& [key, part] : CheckpointTensorsOf(param, *moments)) {
        *part = TensorParallelPartOf(*token_parallel_, param.name,
                                     *WholeTensor(key, param.name, *part));
      }
    }
  }
  if (resident()) SyncToDevice();
  return absl::OkStatus();
}

}  // namespace glm
