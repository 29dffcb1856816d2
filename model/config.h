// The GLM-5.x model configuration: what an HF config.json says, in our names.
#ifndef GLM_MODEL_CONFIG_H_
#define GLM_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/index_sharing.h"

namespace glm {

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t intermediate_size = 0;  // dense MLP layers
  int first_k_dense_replace = 0;  // layers 1..first_k_dense_replace are dense
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  double routed_scaling_factor = 1.0;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  double rms_norm_eps = 1e-5;
  int index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  IndexSharing index_sharing;
  int num_mtp_layers = 0;  // "num_nextn_predict_layers"
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "bfloat16";

  // 1-indexed layer kinds.
  bool IsMoeLayer(int layer) const { return layer > first_k_dense_replace; }
  int64_t QkHeadDim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Parameter counts (embedding and lm_head included; MTP counted separately).
struct ParameterCount {
  int64_t total = 0;   // main model, all experts
  int64_t active = 0;  // per token: top-k + shared experts only
  int64_t mtp = 0;     // MTP layers (not in total)
};

// Parses the content of an HF config.json. Every missing or inconsistent field
// is an InvalidArgument error naming the field.
absl::StatusOr<ModelConfig> ParseHfConfigJson(const std::string& json);

// Reads and parses a config.json file; errors name the file.
absl::StatusOr<ModelConfig> ReadHfConfigFile(const std::string& path);

// Built-in presets: "glm5.2-tiny", "glm5-tiny", "glm5.2-mini", "glm5.2".
absl::StatusOr<ModelConfig> PresetConfig(const std::string& name);
std::vector<std::string> PresetNames();

// Checks internal consistency (positive sizes, experts_per_tok <= experts,
// groups divide experts, index head dims vs rope dim, ...). InvalidArgument
// names the field.
absl::Status ValidateModelConfig(const ModelConfig& config);

ParameterCount CountParameters(const ModelConfig& config);

// Serializes back to an HF-style config.json (for presets and tests).
std::string ToHfConfigJson(const ModelConfig& config);

}  // namespace glm

#endif  // GLM_MODEL_CONFIG_H_
