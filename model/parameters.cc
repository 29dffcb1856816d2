#include "model/parameters.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/parallel.h"
#include "xxhash.h"

namespace glm {
namespace {

// The whole-model shape of each tensor, by its value tensor, before any is
// allocated.
using WholeShapes = std::map<const Tensor*, std::vector<int64_t>>;

void Declare(Parameter& p, std::vector<int64_t> shape, WholeShapes* shapes) {
  (*shapes)[&p.value] = std::move(shape);
}

void DeclareMlp(int64_t hidden, int64_t intermediate, MlpParameters* mlp,
                WholeShapes* shapes) {
  Declare(mlp->gate_proj, {intermediate, hidden}, shapes);
  Declare(mlp->up_proj, {intermediate, hidden}, shapes);
  Declare(mlp->down_proj, {hidden, intermediate}, shapes);
}

// 1-indexed `layer_number` decides dense/MoE; `has_indexer` whether it computes
// top-k.
void DeclareDecoderLayer(const ModelConfig& c, int layer_number,
                         bool has_indexer, DecoderLayerParameters* layer,
                         WholeShapes* shapes) {
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  Declare(layer->input_layernorm, {hidden}, shapes);
  Declare(layer->post_attention_layernorm, {hidden}, shapes);
  AttentionParameters& a = layer->self_attn;
  Declare(a.q_a_proj, {c.q_lora_rank, hidden}, shapes);
  Declare(a.q_a_layernorm, {c.q_lora_rank}, shapes);
  Declare(a.q_b_proj, {heads * c.QkHeadDim(), c.q_lora_rank}, shapes);
  Declare(a.kv_a_proj_with_mqa, {c.kv_lora_rank + c.qk_rope_head_dim, hidden},
          shapes);
  Declare(a.kv_a_layernorm, {c.kv_lora_rank}, shapes);
  Declare(a.kv_b_proj,
          {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
          shapes);
  Declare(a.o_proj, {hidden, heads * c.v_head_dim}, shapes);
  a.has_indexer = has_indexer;
  if (has_indexer) {
    IndexerParameters& i = a.indexer;
    Declare(i.wq_b, {c.index_n_heads * c.index_head_dim, c.q_lora_rank},
            shapes);
    Declare(i.wk, {c.index_head_dim, hidden}, shapes);
    Declare(i.k_norm_weight, {c.index_head_dim}, shapes);
    Declare(i.k_norm_bias, {c.index_head_dim}, shapes);
    Declare(i.weights_proj, {c.index_n_heads, hidden}, shapes);
  }
  layer->is_moe = c.IsMoeLayer(layer_number);
  if (!layer->is_moe) {
    DeclareMlp(hidden, c.intermediate_size, &layer->mlp, shapes);
    return;
  }
  MoeParameters& m = layer->moe;
  const int64_t experts = c.n_routed_experts, inter = c.moe_intermediate_size;
  Declare(m.gate, {experts, hidden}, shapes);
  (*shapes)[&m.e_score_correction_bias] = {experts};
  Declare(m.experts_gate_up, {experts, 2 * inter, hidden}, shapes);
  Declare(m.experts_down, {experts, hidden, inter}, shapes);
  DeclareMlp(hidden, inter * c.n_shared_experts, &m.shared_experts, shapes);
}

// Copies `part` of `whole` into `out`, a tensor of the part's shape where
// `whole` lives: a copy per run (one for a part of dimension 0).
void CopyPart(const Tensor& whole, const TensorPart& part, Tensor* out) {
  const PartRuns runs = RunsOf(part, whole.shape());
  if (runs.length == 0) return;
  for (int64_t r = 0; r < runs.count; ++r) {
    const float* from = whole.data() + runs.first + r * runs.stride;
    float* to = out->data() + r * runs.length;
    if (whole.on_host()) {
      std::copy_n(from, runs.length, to);
    } else {
      whole.allocator()->CopyWithin(to, from, runs.length * sizeof(float));
    }
  }
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

// Element `index` of the standard normal sequence `key`: the SplitMix64
// output at counter `index` gives two uniforms, Box-Muller (cosine branch)
// turns them into a normal value. Counter-based, so any element is drawn
// without drawing the ones before it: a rank draws only what it holds.
float StandardNormalAt(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  constexpr float kTwoPow24 = 16777216.f;
  // (0, 1]: the logarithm stays finite.
  const float u1 = (static_cast<float>(z >> 40) + 1.f) / kTwoPow24;
  const float u2 = static_cast<float>((z >> 8) & 0xFFFFFF) / kTwoPow24;
  constexpr float kTwoPi = 6.28318530717958647692f;
  return std::sqrt(-2.f * std::log(u1)) * std::cos(kTwoPi * u2);
}

// Held elements [begin, end) of a tensor whose part lies at `runs` in the
// whole: held element j is run j / length, offset j % length, and gets the
// draw of its index in the whole tensor.
void DrawHeldElements(uint64_t key, float std, const PartRuns& runs,
                      int64_t begin, int64_t end, float* out) {
  for (int64_t j = begin; j < end;) {
    const int64_t offset = j % runs.length;
    const int64_t start = runs.first + (j / runs.length) * runs.stride + offset;
    const int64_t n = std::min(end - j, runs.length - offset);
    for (int64_t i = 0; i < n; ++i) {
      out[j + i] =
          std * StandardNormalAt(key, static_cast<uint64_t>(start + i));
    }
    j += n;
  }
}

// The shapes of the held parts of `tensors`' values, and of their gradients
// (buffers have none), in order.
struct HeldShapes {
  std::vector<std::vector<int64_t>> values, grads;
};
HeldShapes ShapesOfHeld(
    const std::vector<NamedTensor>& tensors, const HeldTensors& held,
    const std::map<std::string, std::vector<int64_t>>& wholes) {
  HeldShapes shapes;
  for (const NamedTensor& named : tensors) {
    shapes.values.push_back(held.PartShape(named.name, wholes.at(named.name)));
    if (named.grad != nullptr) shapes.grads.push_back(shapes.values.back());
  }
  return shapes;
}

// Allocates (zeros) the held part of each of `tensors`, value and gradient,
// where the current allocator allocates: every value in one allocation and
// every gradient in another (each tensor a view, kernels/tensor_arena.h), so
// that one fill zeroes every gradient and collectives run on the gradients
// where they lie. Returns the gradients' range.
ArenaRange AllocateHeld(
    const std::vector<NamedTensor>& tensors, const HeldTensors& held,
    const std::map<std::string, std::vector<int64_t>>& wholes) {
  Allocator* allocator = CurrentAllocator();
  const HeldShapes shapes = ShapesOfHeld(tensors, held, wholes);
  std::vector<Tensor> values = ZerosInOneAllocation(allocator, shapes.values);
  ArenaRange grad_range;
  std::vector<Tensor> grads =
      ZerosInOneAllocation(allocator, shapes.grads, &grad_range);
  size_t g = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    *tensors[i].value = std::move(values[i]);
    if (tensors[i].grad != nullptr) *tensors[i].grad = std::move(grads[g++]);
  }
  return grad_range;
}

// Lays `tensors` (a model's, on `allocator`; null: host memory) out again as
// AllocateHeld lays out a model of `held` there: a new arena of values holds
// the held part of each value (a tensor not held becomes empty), another of
// gradients the gradients of tensors that keep their shape and zeros for the
// cut ones. The values move before the gradients are allocated, so the old
// values' arena is freed first. Returns the new gradients' range.
ArenaRange RelayOut(Allocator* allocator,
                    const std::vector<NamedTensor>& tensors,
                    const HeldTensors& held,
                    const std::map<std::string, std::vector<int64_t>>& wholes) {
  std::vector<NamedTensor> kept;
  for (const NamedTensor& named : tensors) {
    if (held.Holds(named.name)) {
      kept.push_back(named);
      continue;
    }
    *named.value = Tensor();
    if (named.grad != nullptr) *named.grad = Tensor();
  }
  const HeldShapes shapes = ShapesOfHeld(kept, held, wholes);
  std::vector<Tensor> values = ZerosInOneAllocation(allocator, shapes.values);
  for (size_t i = 0; i < kept.size(); ++i) {
    const Tensor& value = *kept[i].value;
    if (value.shape() == values[i].shape()) {
      values[i].CopyFrom(value);
    } else {
      CopyPart(value, held.PartOf(kept[i].name, value.shape()), &values[i]);
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    *kept[i].value = std::move(values[i]);
  }
  ArenaRange grad_range;
  std::vector<Tensor> grads =
      ZerosInOneAllocation(allocator, shapes.grads, &grad_range);
  size_t g = 0;
  for (const NamedTensor& named : kept) {
    if (named.grad == nullptr) continue;
    Tensor& grad = grads[g++];
    if (named.grad->shape() == grad.shape()) grad.CopyFrom(*named.grad);
    *named.grad = std::move(grad);
  }
  return grad_range;
}

}  // namespace

std::vector<int64_t> HeldTensors::PartShape(
    const std::string& name, const std::vector<int64_t>& whole) const {
  std::vector<int64_t> shape = whole;
  const auto part = parts.find(name);
  if (part != parts.end()) shape[part->second.dim] = part->second.count;
  return shape;
}

TensorPart HeldTensors::PartOf(const std::string& name,
                               const std::vector<int64_t>& whole) const {
  const auto part = parts.find(name);
  return part != parts.end() ? part->second : TensorPart{0, 0, whole[0]};
}

PartRuns RunsOf(const TensorPart& part, const std::vector<int64_t>& whole) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(whole.size()); ++d) {
    if (d < part.dim) outer *= whole[d];
    if (d > part.dim) inner *= whole[d];
  }
  return {outer, part.count * inner, part.first * inner,
          whole[part.dim] * inner};
}

ModelParameters::ModelParameters(const ModelConfig& config,
                                 const HeldTensors& held)
    : config_(config), held_(held) {
  const int64_t hidden = config.hidden_size;
  WholeShapes shapes;
  Declare(embed_tokens, {config.vocab_size, hidden}, &shapes);
  layers.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    DeclareDecoderLayer(config, i + 1,
                        config.index_sharing.IsComputingLayer(i + 1),
                        &layers[i], &shapes);
  }
  Declare(norm, {hidden}, &shapes);
  if (!config.tie_word_embeddings) {
    Declare(lm_head, {config.vocab_size, hidden}, &shapes);
  }
  mtp.resize(config.num_mtp_layers);
  for (int k = 0; k < config.num_mtp_layers; ++k) {
    MtpParameters& m = mtp[k];
    Declare(m.enorm, {hidden}, &shapes);
    Declare(m.hnorm, {hidden}, &shapes);
    Declare(m.eh_proj, {hidden, 2 * hidden}, &shapes);
    // With index sharing the MTP layer reuses the main model's last top-k.
    DeclareDecoderLayer(config, config.num_hidden_layers + k + 1,
                        config.index_sharing.topk_freq <= 1, &m.layer, &shapes);
    Declare(m.shared_head_norm, {hidden}, &shapes);
  }
  std::vector<NamedTensor> allocated;
  for (const NamedTensor& named : Named()) {
    whole_shapes_[named.name] = shapes.at(named.value);
    if (held.Holds(named.name)) allocated.push_back(named);
  }
  grad_arena_.range = AllocateHeld(allocated, held, whole_shapes_);
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

namespace {

// The held gradients of `named` (buffers and unheld tensors left out).
std::vector<Tensor*> HeldGradients(const std::vector<NamedTensor>& named) {
  std::vector<Tensor*> out;
  for (const NamedTensor& t : named) {
    if (t.grad != nullptr && !t.grad->empty()) out.push_back(t.grad);
  }
  return out;
}

}  // namespace

std::vector<Tensor*> ModelParameters::HeadGradients() {
  std::vector<NamedTensor> named;
  bool head = false;
  for (NamedTensor& t : Named()) {
    head = head || t.name == "model.norm.weight";
    if (head) named.push_back(t);
  }
  return HeldGradients(named);
}

std::vector<Tensor*> ModelParameters::LayerGradients(size_t layer) {
  std::vector<NamedTensor> named;
  AddDecoderLayer("", &layers.at(layer), &named);
  return HeldGradients(named);
}

std::vector<Tensor*> ModelParameters::EmbeddingGradients() {
  return HeldGradients({{"", &embed_tokens.value, &embed_tokens.grad}});
}

void ModelParameters::InitRandom(uint64_t seed, float std) {
  for (NamedTensor& t : Named()) {
    if (!held_.Holds(t.name)) continue;
    const std::vector<int64_t>& whole = WholeShape(t.name);
    float* v = t.value->data();
    const int64_t n = t.value->numel();
    if (t.grad == nullptr || whole.size() == 1) {
      // Buffers and 1-D parameters: norms 1, biases 0.
      std::fill_n(v, n, IsNormWeight(t.name) ? 1.f : 0.f);
      continue;
    }
    const uint64_t key =
        XXH3_64bits_withSeed(t.name.data(), t.name.size(), seed);
    const PartRuns runs = RunsOf(held_.PartOf(t.name, whole), whole);
    // Each element's draw depends on its index alone, so every core takes a
    // contiguous range of the tensor and the values do not depend on the split.
    cpu::ParallelFor(n, n, [&](int64_t begin, int64_t end) {
      DrawHeldElements(key, std, runs, begin, end, v);
    });
  }
}

absl::Status ModelParameters::KeepHeld(const HeldTensors& held) {
  // Checked first: a bad `held` changes nothing.
  for (const NamedTensor& named : Named()) {
    if (!held.Holds(named.name)) continue;
    const std::vector<int64_t>& whole = WholeShape(named.name);
    const std::vector<int64_t>& shape = named.value->shape();
    if (shape != whole && shape != held.PartShape(named.name, whole)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", named.name, " has shape [", absl::StrJoin(shape, ", "),
          "]: neither the whole tensor [", absl::StrJoin(whole, ", "),
          "] nor the part held"));
    }
  }
  // Where the model lives (null: host memory), and whether anything changes.
  Allocator* allocator = nullptr;
  bool changes = false;
  for (const NamedTensor& named : Named()) {
    if (allocator == nullptr && !named.value->empty()) {
      allocator = named.value->allocator();
    }
    changes |= held.Holds(named.name)
                   ? named.value->shape() !=
                         held.PartShape(named.name, WholeShape(named.name))
                   : !named.value->empty();
  }
  held_ = held;
  if (changes) {
    grad_arena_.range = RelayOut(allocator, Named(), held, whole_shapes_);
  }
  return absl::OkStatus();
}

std::unique_ptr<ModelParameters> MirrorParameters(ModelParameters& params,
                                                  Allocator* allocator) {
  AllocatorScope on_device(allocator);
  auto mirror =
      std::make_unique<ModelParameters>(params.config(), params.held());
  CopyValues(params, *mirror);
  return mirror;
}

void CopyValues(ModelParameters& from, ModelParameters& to) {
  std::vector<NamedTensor> source = from.Named(), target = to.Named();
  assert(source.size() == target.size());
  for (size_t i = 0; i < source.size(); ++i) {
    target[i].value->CopyFrom(*source[i].value);
  }
}

void CopyGradients(ModelParameters& from, ModelParameters& to) {
  std::vector<NamedTensor> source = from.Named(), target = to.Named();
  assert(source.size() == target.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i].grad != nullptr) target[i].grad->CopyFrom(*source[i].grad);
  }
}

void ModelParameters::ZeroGrad() {
  if (!grad_arena_.range.empty()) {
    grad_arena_.range.SetZero();
    return;
  }
  for (NamedTensor& t : Named()) {
    if (t.grad) t.grad->SetZero();
  }
}

}  // namespace glm
