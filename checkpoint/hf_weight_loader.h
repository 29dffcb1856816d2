// Loads a Hugging Face checkpoint folder (model.safetensors, or shards with
// model.safetensors.index.json) into float32 model weights by HF name.
//
// Targets use transformers' in-memory names: routed experts fused per layer,
// mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows) and
// mlp.experts.down_proj [E, H, I]. The checkpoint may hold them fused or per
// expert (mlp.experts.<e>.{gate,up,down}_proj.weight); either is accepted
// per layer. F32, BF16 and F16 tensors are converted to float32.
//
// Every target must be found with its exact shape, and every checkpoint key
// must be used (read, or checked for a target not held), except keys the model
// does not run: under the MTP prefix model.layers.<L> the embed_tokens and
// shared_head.head copies (the model shares its own), an indexer when the
// model's MTP layer has none (released GLM-5.2 checkpoints carry one although
// the MTP layer reuses the main top-k), and the whole MTP layer for a model
// without MTP (as transformers ignores it).
#ifndef GLM_CHECKPOINT_HF_WEIGHT_LOADER_H_
#define GLM_CHECKPOINT_HF_WEIGHT_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/safetensors.h"
#include "model/config.h"
#include "model/parameters.h"

namespace glm {

// Where one weight goes: the tensor of shape `shape` in the checkpoint, or
// only `part` of it (a rank's share: parts are read without the rest), as
// row-major floats at `data`. Null `data`: the weight is not held here; its
// key is checked (present, shape, float dtype) but not read.
struct WeightTarget {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  std::optional<TensorPart> part;
};

struct WeightLoadSummary {
  int64_t tensors_read = 0;  // checkpoint tensors copied
  int64_t elements = 0;
  int per_expert_layers = 0;         // layers whose experts came per expert
  std::vector<std::string> ignored;  // checkpoint keys left unused, sorted
};

// Fills every target from `folder`. Errors name the key: missing keys and
// unexpected keys (all of them, up to a few listed), a shape or dtype that
// does not fit. Targets may be partly written when an error is returned.
absl::StatusOr<WeightLoadSummary> LoadHfWeights(
    const SafetensorsFolder& folder, const ModelConfig& config,
    const std::vector<WeightTarget>& targets);

// Fills what `params` holds of every parameter and buffer (its config gives
// the shapes, its held() the parts).
absl::StatusOr<WeightLoadSummary> LoadHfWeights(const SafetensorsFolder& folder,
                                                ModelParameters* params);

// A model from an HF folder: DIR/config.json and DIR's weights; of them only
// what `held` names is allocated and read (the rest of the checkpoint is
// checked, not read).
absl::StatusOr<std::unique_ptr<ModelParameters>> LoadHfModel(
    const std::string& dir, const HeldTensors& held = HeldTensors());

}  // namespace glm

#endif  // GLM_CHECKPOINT_HF_WEIGHT_LOADER_H_
