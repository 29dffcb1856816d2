// LoRA adapters on the model's linear weights. Each targeted weight W [out, in]
// gets A [rank, in] and B [out, rank] and runs as W0 + (alpha / rank) * B A,
// with W0 frozen. Before a step the adapters are merged into the weight the
// model uses; the model's gradient of that weight, G, then gives the adapters'
// exactly: dA = s * B^T G and dB = s * G A^T. So the model needs no
// LoRA-specific code and every linear layer (MLA, indexer, dense MLP, shared
// experts) can be targeted. Names follow PEFT: "<module>.lora_A.weight" and
// "<module>.lora_B.weight".
#ifndef GLM_TRAINING_LORA_H_
#define GLM_TRAINING_LORA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/training_state.h"
#include "model/parameters.h"
#include "training/adamw.h"

namespace glm {

struct LoraOptions {
  int rank = 8;
  double alpha = 16;
  // Module names ("q_a_proj", "o_proj", "gate_proj", ...): every 2-D weight
  // whose HF name ends in "<module>.weight" is targeted.
  std::vector<std::string> target_modules;
};

class LoraAdapters {
 public:
  // A ~ U(-1/sqrt(in), 1/sqrt(in)) from `seed` (a stream per target, so
  // every rank draws the same values whatever it holds), B = 0, so training
  // starts from the base model. Targets are every 2-D weight of the whole
  // model whose module is named, held here or not; where a rank holds (or on
  // another pp rank would hold) part of a weight, it keeps the matching part
  // of its adapters (parallel/tensor_parallel_shard.h). InvalidArgument when a
  // target module matches nothing or the rank is not positive.
  static absl::StatusOr<LoraAdapters> Create(ModelParameters* params,
                                             const LoraOptions& options,
                                             uint64_t seed);

  // The same adapters on `params` (a mirror of the model these adapt, in
  // `memory`: a device's), their values copied there: the weights, W0 and
  // the adapters of the mirror live in `memory`.
  LoraAdapters MirrorOn(ModelParameters* params, Allocator* memory) const;
  // Every adapter's values from `other` (a mirror of these, or these of it).
  void CopyValuesFrom(const LoraAdapters& other);

  // W = W0 + s * B A for every target this rank holds; `backend` computes
  // where the weights live.
  void Merge(Backend& backend);
  // Adapter gradients from the targets' weight gradients (which are then
  // zeroed).
  void AdapterGradients(Backend& backend);
  // The adapters of the targets this rank holds (a pipeline rank: those of
  // its stages), which it trains.
  std::vector<TrainableTensor> Trainable();
  // Every target's adapters (each rank keeps all of them, small as they are,
  // so that any rank can write a whole LoRA checkpoint).
  std::vector<TrainableTensor> All();
  int targets() const { return static_cast<int>(targets_.size()); }

 private:
  struct Target {
    std::string module;  // HF name without ".weight"
    Tensor* weight;      // the model's weight, merged (empty: not held)
    Tensor* weight_grad;
    Tensor base;       // W0
    Tensor a, a_grad;  // [rank, in]
    Tensor b, b_grad;  // [out, rank]
  };
  LoraAdapters(double scale) : scale_(scale) {}
  static bool Held(const Target& t) { return t.weight->numel() > 0; }
  std::vector<TrainableTensor> Adapters(bool held_only);

  double scale_;
  std::vector<Target> targets_;
};

}  // namespace glm

#endif  // GLM_TRAINING_LORA_H_
