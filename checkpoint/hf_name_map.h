// The Hugging Face tensor names of a GLM-5.x model and which rank of a
// parallel layout holds each.
//
// Names follow transformers' glm_moe_dsa checkpoints: model.embed_tokens,
// model.layers.<i> (0-indexed; i = num_hidden_layers is the MTP layer),
// model.norm, lm_head. Only computing layers (index sharing) have
// self_attn.indexer.*; the MTP layer has its own indexer only when every layer
// computes (index_topk_freq == 1). Routed experts are either per expert
// (mlp.experts.<e>.{gate,up,down}_proj.weight) or fused
// (mlp.experts.gate_up_proj [E, 2I, H], gate rows first, and
// mlp.experts.down_proj [E, H, I]); a checkpoint keeps the form it came in.
//
// Ownership. Pipeline: the embedding goes to the stage with `E`, model.norm
// and lm_head to the stage with `L`, decoder layer n to the stage holding it,
// the MTP layer to the stage with `m`. Experts: with E experts over EP ranks,
// ep rank r holds experts [r*E/EP, (r+1)*E/EP): whole per-expert tensors, or
// those rows of dim 0 of the fused tensors. Every tensor is written once: dense
// tensors by the tp = cp = dp = 0 replica of their pipeline rank, expert
// tensors by the etp = edp = 0 replica.
//
// Tensor parallelism (not sharded here: tensors are stored whole and TP > 1
// layouts are for the distributed work to slice). Megatron's rules, for when
// it is: column parallel (dim 0 split in TP contiguous chunks):
// embed_tokens and lm_head (vocab parallel), q_b_proj, kv_b_proj, dense and
// shared-expert gate_proj/up_proj, expert gate/up (with ETP); for the fused
// gate_up_proj the gate and up halves are each split and a rank holds
// [gate chunk; up chunk]. Row parallel (dim 1 split): o_proj, dense and
// shared-expert down_proj, expert down_proj (ETP). Replicated: every norm,
// q_a_proj and kv_a_proj_with_mqa (Megatron's "duplicated" down projections),
// the router and its bias, the indexer weights, MTP enorm/hnorm/eh_proj.
#ifndef GLM_CHECKPOINT_HF_NAME_MAP_H_
#define GLM_CHECKPOINT_HF_NAME_MAP_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "parallel/rank_grid.h"
#include "proto/checkpoint.pb.h"

namespace glm {

enum class ExpertForm { kPerExpert, kFused };

// "per_expert" / "fused", as manifests record it.
std::string_view ExpertFormName(ExpertForm form);
absl::StatusOr<ExpertForm> ExpertFormFromName(std::string_view name);

// How Megatron splits a tensor under tensor parallelism (see file comment).
enum class TpSplit { kReplicated, kColumn, kRow };

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  // False for tensors a checkpoint may carry but the model does not need (the
  // MTP layer's own embed_tokens and shared_head.head copies, and its indexer
  // when the MTP layer reuses the main model's top-k).
  bool required = true;
  int pp_rank = 0;
  int expert = -1;             // per-expert tensor: its expert
  bool fused_experts = false;  // dim 0 indexes the experts
  TpSplit tp_split = TpSplit::kReplicated;

  bool is_expert() const { return expert >= 0 || fused_experts; }
};

// Rows [begin, end) of a tensor's dim 0.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const RowRange& other) const {
    return begin == other.begin && end == other.end;
  }
};

// The smallest world a layout needs: TP, PP, CP and EP, ETP from `layout`, and
// as few data-parallel replicas as make both rank grids fit. A `dp` set in
// the layout is kept.
int WorldSize(const v1::ParallelLayout& layout);

class HfNameMap {
 public:
  // Plans the pipeline stages of `layout` (its layout string or an even split)
  // and builds the rank grid; errors name the invalid size or stage.
  static absl::StatusOr<HfNameMap> Create(const ModelConfig& config,
                                          ExpertForm form,
                                          const v1::ParallelLayout& layout);

  // Every tensor, required and optional, in model order.
  const std::vector<HfTensor>& tensors() const { return tensors_; }
  // nullptr for a name the model does not have.
  const HfTensor* Find(const std::string& name) const;
  int world_size() const { return static_cast<int>(grid_.ranks.size()); }
  const RankCoordinates& coordinates(int rank) const {
    return grid_.ranks[rank];
  }
  ExpertForm expert_form() const { return form_; }

  // The dim-0 rows of the tensor called `name` (of `dim0` rows) that `rank`
  // holds: the rank's experts of a fused expert tensor, else all rows. An
  // optimizer name "<state>/<param>" is placed as <param>; names outside the
  // model (adapters) are whole.
  RowRange RowsHeld(const std::string& name, int rank, int64_t dim0) const;
  // The model tensor a state name is about ("exp_avg/x" -> x); nullptr when
  // outside the model.
  const HfTensor* ParamOf(const std::string& name) const;
  // Whether `rank` is the one that writes its part of `name` to a
  // checkpoint (see the file comment); a name outside the model is written by
  // the rank's tp = cp = dp = 0 replica.
  bool Writes(const std::string& name, int rank) const;

 private:
  ModelConfig config_;
  ExpertForm form_ = ExpertForm::kPerExpert;
  int ep_ = 1;
  RankGrid grid_;
  std::vector<HfTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace glm

#endif  // GLM_CHECKPOINT_HF_NAME_MAP_H_
