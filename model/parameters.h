// Every weight of a GLM-5.x model with its gradient, addressed by Hugging Face
// names.
//
// Routed experts are stored fused per layer as in transformers'
// GlmMoeDsaExperts: mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up
// rows) and mlp.experts.down_proj [E, H, I]; a loader splits or joins
// per-expert checkpoint keys. mlp.gate.e_score_correction_bias is a buffer: it
// has a value and no gradient. The MTP layer lives at HF index
// num_hidden_layers (model.layers.<L>.*).
#ifndef GLM_MODEL_PARAMETERS_H_
#define GLM_MODEL_PARAMETERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "model/config.h"

namespace glm {

struct Parameter {
  Tensor value;
  Tensor grad;
  void Allocate(std::vector<int64_t> shape) {
    value = Tensor(shape);
    grad = Tensor(std::move(shape));
  }
};

struct IndexerParameters {
  Parameter wq_b;           // [index_heads * index_dim, q_lora_rank]
  Parameter wk;             // [index_dim, hidden]
  Parameter k_norm_weight;  // [index_dim]
  Parameter k_norm_bias;    // [index_dim]
  Parameter weights_proj;   // [index_heads, hidden]
};

struct AttentionParameters {
  Parameter q_a_proj;            // [q_lora_rank, hidden]
  Parameter q_a_layernorm;       // [q_lora_rank]
  Parameter q_b_proj;            // [heads * (nope + rope), q_lora_rank]
  Parameter kv_a_proj_with_mqa;  // [kv_lora_rank + rope, hidden]
  Parameter kv_a_layernorm;      // [kv_lora_rank]
  Parameter kv_b_proj;           // [heads * (nope + v), kv_lora_rank]
  Parameter o_proj;              // [hidden, heads * v]
  bool has_indexer = false;      // computing layers only
  IndexerParameters indexer;
};

struct MlpParameters {
  Parameter gate_proj;  // [intermediate, hidden]
  Parameter up_proj;    // [intermediate, hidden]
  Parameter down_proj;  // [hidden, intermediate]
};

struct MoeParameters {
  Parameter gate;                  // router [experts, hidden]
  Tensor e_score_correction_bias;  // [experts], buffer
  Parameter experts_gate_up;       // [experts, 2 * moe_intermediate, hidden]
  Parameter experts_down;          // [experts, hidden, moe_intermediate]
  MlpParameters shared_experts;
};

struct DecoderLayerParameters {
  Parameter input_layernorm;
  Parameter post_attention_layernorm;
  AttentionParameters self_attn;
  bool is_moe = false;
  MlpParameters mlp;  // dense layers
  MoeParameters moe;  // MoE layers
};

struct MtpParameters {
  Parameter enorm;
  Parameter hnorm;
  Parameter eh_proj;  // [hidden, 2 * hidden]
  DecoderLayerParameters layer;
  Parameter shared_head_norm;
};

// One entry of ModelParameters::Named(): grad is null for buffers.
struct NamedTensor {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

class ModelParameters {
 public:
  // Allocates every tensor (zeros) for `config`.
  explicit ModelParameters(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // Every parameter and buffer under its HF name, in a fixed order.
  std::vector<NamedTensor> Named();
  // Matrices and expert slabs ~ N(0, std), norm weights 1, biases and buffers
  // 0.
  void InitRandom(uint64_t seed, float std = 0.02f);
  void ZeroGrad();

  Parameter embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayerParameters> layers;
  Parameter norm;
  Parameter lm_head;  // [vocab, hidden]; unallocated with tied embeddings

  // The output projection: lm_head, or embed_tokens when tie_word_embeddings.
  Parameter& OutputHead() {
    return config_.tie_word_embeddings ? embed_tokens : lm_head;
  }
  std::vector<MtpParameters> mtp;

 private:
  ModelConfig config_;
};

}  // namespace glm

#endif  // GLM_MODEL_PARAMETERS_H_
