#include "model/parameters.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

void AllocateMlp(int64_t hidden, int64_t intermediate, MlpParameters* mlp) {
  mlp->gate_proj.Allocate({intermediate, hidden});
  mlp->up_proj.Allocate({intermediate, hidden});
  mlp->down_proj.Allocate({hidden, intermediate});
}

// 1-indexed `layer_number` decides dense/MoE; `has_indexer` whether it computes
// top-k.
void AllocateDecoderLayer(const ModelConfig& c, int layer_number,
                          bool has_indexer, DecoderLayerParameters* layer) {
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  layer->input_layernorm.Allocate({hidden});
  layer->post_attention_layernorm.Allocate({hidden});
  AttentionParameters& a = layer->self_attn;
  a.q_a_proj.Allocate({c.q_lora_rank, hidden});
  a.q_a_layernorm.Allocate({c.q_lora_rank});
  a.q_b_proj.Allocate({heads * c.QkHeadDim(), c.q_lora_rank});
  a.kv_a_proj_with_mqa.Allocate({c.kv_lora_rank + c.qk_rope_head_dim, hidden});
  a.kv_a_layernorm.Allocate({c.kv_lora_rank});
  a.kv_b_proj.Allocate(
      {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank});
  a.o_proj.Allocate({hidden, heads * c.v_head_dim});
  a.has_indexer = has_indexer;
  if (has_indexer) {
    IndexerParameters& i = a.indexer;
    i.wq_b.Allocate({c.index_n_heads * c.index_head_dim, c.q_lora_rank});
    i.wk.Allocate({c.index_head_dim, hidden});
    i.k_norm_weight.Allocate({c.index_head_dim});
    i.k_norm_bias.Allocate({c.index_head_dim});
    i.weights_proj.Allocate({c.index_n_heads, hidden});
  }
  layer->is_moe = c.IsMoeLayer(layer_number);
  if (!layer->is_moe) {
    AllocateMlp(hidden, c.intermediate_size, &layer->mlp);
    return;
  }
  MoeParameters& m = layer->moe;
  const int64_t experts = c.n_routed_experts, inter = c.moe_intermediate_size;
  m.gate.Allocate({experts, hidden});
  m.e_score_correction_bias = Tensor({experts});
  m.experts_gate_up.Allocate({experts, 2 * inter, hidden});
  m.experts_down.Allocate({experts, hidden, inter});
  AllocateMlp(hidden, inter * c.n_shared_experts, &m.shared_experts);
}

void AddParameter(const std::string& name, Parameter* p,
                  std::vector<NamedTensor>* out) {
  out->push_back({name, &p->value, &p->grad});
}

void AddMlp(const std::string& prefix, MlpParameters* mlp,
            std::vector<NamedTensor>* out) {
  AddParameter(prefix + "gate_proj.weight", &mlp->gate_proj, out);
  AddParameter(prefix + "up_proj.weight", &mlp->up_proj, out);
  AddParameter(prefix + "down_proj.weight", &mlp->down_proj, out);
}

void AddDecoderLayer(const std::string& prefix, DecoderLayerParameters* layer,
                     std::vector<NamedTensor>* out) {
  AddParameter(prefix + "input_layernorm.weight", &layer->input_layernorm, out);
  AddParameter(prefix + "post_attention_layernorm.weight",
               &layer->post_attention_layernorm, out);
  const std::string attn = prefix + "self_attn.";
  AttentionParameters& a = layer->self_attn;
  AddParameter(attn + "q_a_proj.weight", &a.q_a_proj, out);
  AddParameter(attn + "q_a_layernorm.weight", &a.q_a_layernorm, out);
  AddParameter(attn + "q_b_proj.weight", &a.q_b_proj, out);
  AddParameter(attn + "kv_a_proj_with_mqa.weight", &a.kv_a_proj_with_mqa, out);
  AddParameter(attn + "kv_a_layernorm.weight", &a.kv_a_layernorm, out);
  AddParameter(attn + "kv_b_proj.weight", &a.kv_b_proj, out);
  AddParameter(attn + "o_proj.weight", &a.o_proj, out);
  if (a.has_indexer) {
    const std::string idx = attn + "indexer.";
    AddParameter(idx + "wq_b.weight", &a.indexer.wq_b, out);
    AddParameter(idx + "wk.weight", &a.indexer.wk, out);
    AddParameter(idx + "k_norm.weight", &a.indexer.k_norm_weight, out);
    AddParameter(idx + "k_norm.bias", &a.indexer.k_norm_bias, out);
    AddParameter(idx + "weights_proj.weight", &a.indexer.weights_proj, out);
  }
  const std::string mlp = prefix + "mlp.";
  if (!layer->is_moe) {
    AddMlp(mlp, &layer->mlp, out);
    return;
  }
  MoeParameters& m = layer->moe;
  AddParameter(mlp + "gate.weight", &m.gate, out);
  out->push_back({mlp + "gate.e_score_correction_bias",
                  &m.e_score_correction_bias, nullptr});
  AddParameter(mlp + "experts.gate_up_proj", &m.experts_gate_up, out);
  AddParameter(mlp + "experts.down_proj", &m.experts_down, out);
  AddMlp(mlp + "shared_experts.", &m.shared_experts, out);
}

// Norm weights start at 1 (names end in "norm.weight" or "layernorm.weight").
bool IsNormWeight(const std::string& name) {
  const std::string suffix = "norm.weight";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ModelParameters::ModelParameters(const ModelConfig& config) : config_(config) {
  const int64_t hidden = config.hidden_size;
  embed_tokens.Allocate({config.vocab_size, hidden});
  layers.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    AllocateDecoderLayer(config, i + 1,
                         config.index_sharing.IsComputingLayer(i + 1),
                         &layers[i]);
  }
  norm.Allocate({hidden});
  if (!config.tie_word_embeddings)
    lm_head.Allocate({config.vocab_size, hidden});
  mtp.resize(config.num_mtp_layers);
  for (int k = 0; k < config.num_mtp_layers; ++k) {
    MtpParameters& m = mtp[k];
    m.enorm.Allocate({hidden});
    m.hnorm.Allocate({hidden});
    m.eh_proj.Allocate({hidden, 2 * hidden});
    // With index sharing the MTP layer reuses the main model's last top-k.
    AllocateDecoderLayer(config, config.num_hidden_layers + k + 1,
                         config.index_sharing.topk_freq <= 1, &m.layer);
    m.shared_head_norm.Allocate({hidden});
  }
}

std::vector<NamedTensor> ModelParameters::Named() {
  std::vector<NamedTensor> out;
  AddParameter("model.embed_tokens.weight", &embed_tokens, &out);
  for (size_t i = 0; i < layers.size(); ++i) {
    AddDecoderLayer(absl::StrCat("model.layers.", i, "."), &layers[i], &out);
  }
  AddParameter("model.norm.weight", &norm, &out);
  if (!config_.tie_word_embeddings) {
    AddParameter("lm_head.weight", &lm_head, &out);
  }
  for (size_t k = 0; k < mtp.size(); ++k) {
    const std::string prefix =
        absl::StrCat("model.layers.", config_.num_hidden_layers + k, ".");
    AddParameter(prefix + "enorm.weight", &mtp[k].enorm, &out);
    AddParameter(prefix + "hnorm.weight", &mtp[k].hnorm, &out);
    AddParameter(prefix + "eh_proj.weight", &mtp[k].eh_proj, &out);
    AddDecoderLayer(prefix, &mtp[k].layer, &out);
    AddParameter(prefix + "shared_head.norm.weight", &mtp[k].shared_head_norm,
                 &out);
  }
  return out;
}

void ModelParameters::InitRandom(uint64_t seed, float std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, std);
  for (NamedTensor& t : Named()) {
    std::vector<float>& v = t.value->values();
    if (t.grad == nullptr || t.value->shape().size() == 1) {
      // Buffers and 1-D parameters: norms 1, biases 0.
      std::fill(v.begin(), v.end(), IsNormWeight(t.name) ? 1.f : 0.f);
      continue;
    }
    for (float& x : v) x = normal(rng);
  }
}

void ModelParameters::ZeroGrad() {
  for (NamedTensor& t : Named()) {
    if (t.grad) t.grad->SetZero();
  }
}

}  // namespace glm
