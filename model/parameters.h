// Every weight of a GLM-5.x model with its gradient, addressed by Hugging Face
// names.
//
// Routed experts are stored fused per layer as in transformers'
// GlmMoeDsaExperts: mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up
// rows) and mlp.experts.down_proj [E, H, I]; a loader splits or joins
// per-expert checkpoint keys. mlp.gate.e_score_correction_bias is a buffer: it
// has a value and no gradient. The MTP layer lives at HF index
// num_hidden_layers (model.layers.<L>.*).
//
// A parallel rank allocates only what it holds (HeldTensors): some tensors,
// and of some of them a range of one dimension (tensor-parallel rows or
// columns, expert-parallel experts); the others stay empty.
#ifndef GLM_MODEL_PARAMETERS_H_
#define GLM_MODEL_PARAMETERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "kernels/tensor_arena.h"
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

// The part of a tensor a rank holds: indices [first, first + count) of
// dimension `dim`, every index of the other dimensions.
struct TensorPart {
  int dim = 0;
  int64_t first = 0;
  int64_t count = 0;
};

// Where a part lies in the whole row-major tensor: `count` runs of `length`
// elements, run r starting at element first + r * stride.
struct PartRuns {
  int64_t count = 0;
  int64_t length = 0;
  int64_t first = 0;
  int64_t stride = 0;
};
PartRuns RunsOf(const TensorPart& part, const std::vector<int64_t>& whole);

// Which tensors (by Named() name) a rank holds, and which part of each.
struct HeldTensors {
  // Absent: every tensor.
  std::optional<std::set<std::string>> names;
  // The tensors held in part; the others are held whole.
  std::map<std::string, TensorPart> parts;

  bool Holds(const std::string& name) const {
    return !names || names->count(name) > 0;
  }
  // The shape of the held part of `name`, a tensor of shape `whole`.
  std::vector<int64_t> PartShape(const std::string& name,
                                 const std::vector<int64_t>& whole) const;
  // The held part of `name` (all of dim 0 when held whole).
  TensorPart PartOf(const std::string& name,
                    const std::vector<int64_t>& whole) const;
};

class ModelParameters {
 public:
  // Allocates (zeros) the part of every tensor of `config` that `held` names,
  // where the current allocator allocates (null: host memory); the other
  // tensors are empty. The values sit in one allocation and the gradients in
  // another (each Parameter a view of the two, kernels/tensor_arena.h;
  // ZeroGrad is one fill).
  explicit ModelParameters(const ModelConfig& config,
                           const HeldTensors& held = HeldTensors());

  const ModelConfig& config() const { return config_; }
  const HeldTensors& held() const { return held_; }
  // The shape of `name` in the whole model (held or not).
  const std::vector<int64_t>& WholeShape(const std::string& name) const {
    return whole_shapes_.at(name);
  }

  // Every parameter and buffer under its HF name, in a fixed order.
  std::vector<NamedTensor> Named();
  // The held gradients a backward pass finishes together, in Named() order:
  // the head's (final norm, an untied lm_head, the MTP layers'), one decoder
  // layer's, and the embedding's (which a tied head and the MTP layers also
  // add to, so that a backward finishes it last).
  std::vector<Tensor*> HeadGradients();
  std::vector<Tensor*> LayerGradients(size_t layer);
  std::vector<Tensor*> EmbeddingGradients();
  // Matrices and expert slabs ~ N(0, std), norm weights 1, biases and buffers
  // 0. Element i of a tensor is a counter-based draw from (seed, the tensor's
  // name, i), so a rank draws only the elements it holds (time and memory
  // scale with its share) and each equals the same element of a whole model
  // initialized with the same seed.
  void InitRandom(uint64_t seed, float std = 0.02f);
  // Keeps of each tensor only what `held` names (a subset of what is held
  // now): tensors not named become empty, whole tensors are cut to their
  // part (with a zero gradient); a tensor that already has its part's shape
  // stays. The kept tensors stay where the model lives, laid out again as a
  // new model of `held` is there (its values in one new allocation, its
  // gradients in another, the old ones freed), unless nothing changes.
  // InvalidArgument naming the tensor when its shape is neither.
  absl::Status KeepHeld(const HeldTensors& held);
  // One fill over the gradient arena when there is one, else one per tensor.
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
  HeldTensors held_;
  // The gradients' arena of this model's own tensors: moves keep it, copies
  // (whose tensors own their storage) do not.
  struct OwnArena {
    ArenaRange range;
    OwnArena() = default;
    OwnArena(const OwnArena&) {}
    OwnArena& operator=(const OwnArena&) {
      range = {};
      return *this;
    }
    OwnArena(OwnArena&&) = default;
    OwnArena& operator=(OwnArena&&) = default;
  };
  // Set when the tensors are allocated (KeepHeld sets it to the gradients'
  // new allocation when it lays them out again).
  OwnArena grad_arena_;
  std::map<std::string, std::vector<int64_t>> whole_shapes_;
};

// A model with the config and held tensors of `params` whose tensors live on
// `allocator` (null: host memory): its values copied from `params`, its
// gradients zero. A device backend computes on such a mirror.
std::unique_ptr<ModelParameters> MirrorParameters(ModelParameters& params,
                                                  Allocator* allocator);
// Copy every value (or gradient) of `from` into the same tensor of `to`, a
// model with the same held tensors, wherever each of the two lives.
void CopyValues(ModelParameters& from, ModelParameters& to);
void CopyGradients(ModelParameters& from, ModelParameters& to);

}  // namespace glm

#endif  // GLM_MODEL_PARAMETERS_H_
