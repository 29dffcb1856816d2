#include "checkpoint/hf_name_map.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/pipeline_layout.h"

namespace glm {
namespace {

// Appends the tensors of one model part, all on one pipeline rank.
class TensorList {
 public:
  TensorList(std::vector<HfTensor>* out, std::string prefix, int pp_rank)
      : out_(out), prefix_(std::move(prefix)), pp_rank_(pp_rank) {}

  HfTensor& Add(const std::string& name, std::vector<int64_t> shape,
                TpSplit split = TpSplit::kReplicated) {
    HfTensor tensor;
    tensor.name = prefix_ + name;
    tensor.shape = std::move(shape);
    tensor.pp_rank = pp_rank_;
    tensor.tp_split = split;
    out_->push_back(std::move(tensor));
    return out_->back();
  }

 private:
  std::vector<HfTensor>* out_;
  std::string prefix_;
  int pp_rank_;
};

// Whether a layer's checkpoint holds DSA indexer weights.
enum class Indexer {
  kAbsent,
  kRequired,
  // May be there and is carried through, but the model does not run it.
  kOptional,
};

void AddAttention(const ModelConfig& c, Indexer indexer, TensorList& list) {
  const int64_t heads = c.num_attention_heads;
  list.Add("self_attn.q_a_proj.weight", {c.q_lora_rank, c.hidden_size});
  list.Add("self_attn.q_a_layernorm.weight", {c.q_lora_rank});
  list.Add("self_attn.q_b_proj.weight", {heads * c.QkHeadDim(), c.q_lora_rank},
           TpSplit::kColumn);
  list.Add("self_attn.kv_a_proj_with_mqa.weight",
           {c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size});
  list.Add("self_attn.kv_a_layernorm.weight", {c.kv_lora_rank});
  list.Add("self_attn.kv_b_proj.weight",
           {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
           TpSplit::kColumn);
  list.Add("self_attn.o_proj.weight", {c.hidden_size, heads * c.v_head_dim},
           TpSplit::kRow);
  if (indexer == Indexer::kAbsent) return;
  const std::pair<const char*, std::vector<int64_t>> weights[] = {
      {"self_attn.indexer.wq_b.weight",
       {c.index_n_heads * c.index_head_dim, c.q_lora_rank}},
      {"self_attn.indexer.wk.weight", {c.index_head_dim, c.hidden_size}},
      {"self_attn.indexer.k_norm.weight", {c.index_head_dim}},
      {"self_attn.indexer.k_norm.bias", {c.index_head_dim}},
      {"self_attn.indexer.weights_proj.weight",
       {c.index_n_heads, c.hidden_size}},
  };
  for (const auto& [name, shape] : weights) {
    list.Add(name, shape).required = indexer == Indexer::kRequired;
  }
}

void AddMlp(const std::string& prefix, int64_t hidden, int64_t intermediate,
            TensorList& list) {
  list.Add(prefix + "gate_proj.weight", {intermediate, hidden},
           TpSplit::kColumn);
  list.Add(prefix + "up_proj.weight", {intermediate, hidden}, TpSplit::kColumn);
  list.Add(prefix + "down_proj.weight", {hidden, intermediate}, TpSplit::kRow);
}

void AddMoe(const ModelConfig& c, ExpertForm form, TensorList& list) {
  const int64_t experts = c.n_routed_experts;
  const int64_t inter = c.moe_intermediate_size;
  list.Add("mlp.gate.weight", {experts, c.hidden_size});
  list.Add("mlp.gate.e_score_correction_bias", {experts});
  AddMlp("mlp.shared_experts.", c.hidden_size, inter * c.n_shared_experts,
         list);
  if (form == ExpertForm::kFused) {
    list.Add("mlp.experts.gate_up_proj", {experts, 2 * inter, c.hidden_size},
             TpSplit::kColumn)
        .fused_experts = true;
    list.Add("mlp.experts.down_proj", {experts, c.hidden_size, inter},
             TpSplit::kRow)
        .fused_experts = true;
    return;
  }
  for (int e = 0; e < experts; ++e) {
    const std::string prefix = absl::StrCat("mlp.experts.", e, ".");
    list.Add(prefix + "gate_proj.weight", {inter, c.hidden_size},
             TpSplit::kColumn)
        .expert = e;
    list.Add(prefix + "up_proj.weight", {inter, c.hidden_size},
             TpSplit::kColumn)
        .expert = e;
    list.Add(prefix + "down_proj.weight", {c.hidden_size, inter}, TpSplit::kRow)
        .expert = e;
  }
}

// One decoder layer's tensors, the MTP layer's included.
void AddDecoderLayer(const ModelConfig& c, ExpertForm form, Indexer indexer,
                     bool moe, TensorList& list) {
  list.Add("input_layernorm.weight", {c.hidden_size});
  AddAttention(c, indexer, list);
  list.Add("post_attention_layernorm.weight", {c.hidden_size});
  if (moe) {
    AddMoe(c, form, list);
  } else {
    AddMlp("mlp.", c.hidden_size, c.intermediate_size, list);
  }
}

std::string LayerPrefix(int index) {
  return absl::StrCat("model.layers.", index, ".");
}

struct StageRanks {
  int embedding = 0, loss = 0, mtp = 0;
  std::vector<int> layer;  // 1-indexed layer -> pp rank
};

absl::StatusOr<StageRanks> PlanStageRanks(const ModelConfig& config,
                                          const v1::ParallelLayout& layout) {
  LayoutRequest request;
  request.layout = layout.layout();
  request.num_layers = config.num_hidden_layers;
  request.mtp_layers = config.num_mtp_layers;
  request.pp = std::max(layout.pp(), 1);
  request.vpp = std::max(layout.vpp(), 1);
  request.sharing = config.index_sharing;
  absl::StatusOr<std::vector<StageSlice>> stages = PlanStages(request);
  if (!stages.ok()) return stages.status();
  StageRanks ranks;
  ranks.layer.assign(config.num_hidden_layers + 1, 0);
  for (const StageSlice& stage : *stages) {
    if (stage.has_embedding) ranks.embedding = stage.pp_rank;
    if (stage.has_loss) ranks.loss = stage.pp_rank;
    if (stage.mtp_layers > 0) ranks.mtp = stage.pp_rank;
    for (int layer = stage.first_layer;
         stage.first_layer > 0 && layer <= stage.last_layer; ++layer) {
      ranks.layer[layer] = stage.pp_rank;
    }
  }
  return ranks;
}

std::vector<HfTensor> ModelTensors(const ModelConfig& c, ExpertForm form,
                                   const StageRanks& ranks) {
  std::vector<HfTensor> tensors;
  TensorList(&tensors, "model.", ranks.embedding)
      .Add("embed_tokens.weight", {c.vocab_size, c.hidden_size},
           TpSplit::kColumn);
  for (int layer = 1; layer <= c.num_hidden_layers; ++layer) {
    TensorList list(&tensors, LayerPrefix(layer - 1), ranks.layer[layer]);
    AddDecoderLayer(c, form,
                    c.index_sharing.IsComputingLayer(layer) ? Indexer::kRequired
                                                            : Indexer::kAbsent,
                    c.IsMoeLayer(layer), list);
  }
  TensorList final_stage(&tensors, "", ranks.loss);
  final_stage.Add("model.norm.weight", {c.hidden_size});
  if (!c.tie_word_embeddings) {
    final_stage.Add("lm_head.weight", {c.vocab_size, c.hidden_size},
                    TpSplit::kColumn);
  }
  for (int k = 0; k < c.num_mtp_layers; ++k) {
    const int index = c.num_hidden_layers + k;
    TensorList list(&tensors, LayerPrefix(index), ranks.mtp);
    list.Add("enorm.weight", {c.hidden_size});
    list.Add("hnorm.weight", {c.hidden_size});
    list.Add("eh_proj.weight", {c.hidden_size, 2 * c.hidden_size});
    // With index sharing the MTP layer reuses the main model's top-k, yet
    // released GLM-5.2 checkpoints still carry an indexer for it (their
    // 59,585 tensors count it): carried through bitwise, never run.
    AddDecoderLayer(c, form,
                    c.index_sharing.topk_freq == 1 ? Indexer::kRequired
                                                   : Indexer::kOptional,
                    c.IsMoeLayer(index + 1), list);
    list.Add("shared_head.norm.weight", {c.hidden_size});
    list.Add("embed_tokens.weight", {c.vocab_size, c.hidden_size},
             TpSplit::kColumn)
        .required = false;
    list.Add("shared_head.head.weight", {c.vocab_size, c.hidden_size},
             TpSplit::kColumn)
        .required = false;
  }
  return tensors;
}

}  // namespace

std::string_view ExpertFormName(ExpertForm form) {
  return form == ExpertForm::kFused ? "fused" : "per_expert";
}

absl::StatusOr<ExpertForm> ExpertFormFromName(std::string_view name) {
  if (name == "fused") return ExpertForm::kFused;
  if (name == "per_expert") return ExpertForm::kPerExpert;
  return absl::InvalidArgumentError(
      absl::StrCat("expert form '", std::string(name),
                   "' is neither 'per_expert' nor 'fused'"));
}

int WorldSize(const v1::ParallelLayout& layout) {
  const int tp = std::max(layout.tp(), 1), cp = std::max(layout.cp(), 1);
  const int pp = std::max(layout.pp(), 1), ep = std::max(layout.ep(), 1);
  const int etp = std::max(layout.etp(), 1);
  if (layout.dp() > 0) return tp * cp * layout.dp() * pp;
  return std::lcm(tp * cp, etp * ep) * pp;
}

absl::StatusOr<HfNameMap> HfNameMap::Create(const ModelConfig& config,
                                            ExpertForm form,
                                            const v1::ParallelLayout& layout) {
  GridSpec spec;
  spec.world = WorldSize(layout);
  spec.tp = std::max(layout.tp(), 1);
  spec.pp = std::max(layout.pp(), 1);
  spec.cp = std::max(layout.cp(), 1);
  spec.ep = std::max(layout.ep(), 1);
  spec.etp = std::max(layout.etp(), 1);
  spec.num_experts = config.n_routed_experts;
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  if (!grid.ok()) return grid.status();
  absl::StatusOr<StageRanks> ranks = PlanStageRanks(config, layout);
  if (!ranks.ok()) return ranks.status();

  HfNameMap map;
  map.config_ = config;
  map.form_ = form;
  map.ep_ = spec.ep;
  map.grid_ = *std::move(grid);
  map.tensors_ = ModelTensors(config, form, *ranks);
  for (size_t i = 0; i < map.tensors_.size(); ++i) {
    map.by_name_[map.tensors_[i].name] = i;
  }
  return map;
}

const HfTensor* HfNameMap::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const HfTensor* HfNameMap::ParamOf(const std::string& name) const {
  if (const HfTensor* tensor = Find(name)) return tensor;
  const size_t slash = name.find('/');
  return slash == std::string::npos ? nullptr : Find(name.substr(slash + 1));
}

RowRange HfNameMap::RowsHeld(const std::string& name, int rank,
                             int64_t dim0) const {
  const HfTensor* tensor = ParamOf(name);
  if (tensor == nullptr || !tensor->fused_experts) return {0, dim0};
  const int64_t per_rank = dim0 / ep_;
  const int64_t begin = grid_.ranks[rank].ep * per_rank;
  return {begin, begin + per_rank};
}

bool HfNameMap::Writes(const std::string& name, int rank) const {
  const RankCoordinates& at = grid_.ranks[rank];
  const HfTensor* tensor = ParamOf(name);
  if (tensor == nullptr) return at.tp == 0 && at.cp == 0 && at.dp == 0;
  if (tensor->pp_rank != at.pp) return false;
  if (!tensor->is_expert()) return at.tp == 0 && at.cp == 0 && at.dp == 0;
  if (at.etp != 0 || at.edp != 0) return false;
  if (tensor->fused_experts) return true;
  const int per_rank = config_.n_routed_experts / ep_;
  return tensor->expert / per_rank == at.ep;
}

}  // namespace glm
