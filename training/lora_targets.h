// Which weights LoRA adapts: for a target module ("q_a_proj", "o_proj",
// "gate_proj", ...), every trainable 2-D weight whose HF name ends in
// "<module>.weight". The adapters and the job-spec rules (which refuse
// targets at submit time) decide it the same way through this.
#ifndef GLM_TRAINING_LORA_TARGETS_H_
#define GLM_TRAINING_LORA_TARGETS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace glm {

// The module an adapter on tensor `name` (of shape `whole_shape`) targets:
// "q_a_proj" for "model.layers.3.self_attn.q_a_proj.weight". Empty when no
// adapter may target it: it is a buffer (not trainable), not 2-D, or not a
// weight.
std::string LoraModuleOf(const std::string& name,
                         const std::vector<int64_t>& whole_shape,
                         bool trainable);

}  // namespace glm

#endif  // GLM_TRAINING_LORA_TARGETS_H_
