#include "parallel/tensor_parallel_shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace glm {

namespace {

constexpr char kLoraA[] = ".lora_A.weight";
constexpr char kLoraB[] = ".lora_B.weight";

// The split of a model weight (see TensorParallelDim).
int WeightDim(const std::string& name) {
  if (absl::EndsWith(name, "self_attn.q_b_proj.weight") ||
      absl::EndsWith(name, "self_attn.kv_b_proj.weight")) {
    return 0;
  }
  if (absl::EndsWith(name, "self_attn.o_proj.weight")) return 1;
  // Dense MLPs only: shared experts stay whole like the routed ones.
  if (absl::StrContains(name, "shared_experts.")) return -1;
  if (absl::EndsWith(name, ".mlp.gate_proj.weight") ||
      absl::EndsWith(name, ".mlp.up_proj.weight")) {
    return 0;
  }
  if (absl::EndsWith(name, ".mlp.down_proj.weight")) return 1;
  return -1;
}

}  // namespace

int TensorParallelDim(const std::string& name) {
  for (const auto& [suffix, factor_dim] :
       {std::pair<const char*, int>{kLoraA, 1}, {kLoraB, 0}}) {
    if (!absl::EndsWith(name, suffix)) continue;
    const std::string weight =
        name.substr(0, name.size() - std::strlen(suffix)) + ".weight";
    return WeightDim(weight) == factor_dim ? factor_dim : -1;
  }
  return WeightDim(name);
}

absl::Status CheckTensorParallelSize(const ModelConfig& config, int tp) {
  if (config.num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.tp: ", tp, " does not divide the model's ",
                     "num_attention_heads ", config.num_attention_heads));
  }
  if (config.intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.tp: ", tp, " does not divide the model's ",
                     "intermediate_size ", config.intermediate_size));
  }
  return absl::OkStatus();
}

Tensor TensorParallelPart(const Tensor& whole, int dim, int parts, int index) {
  const int64_t rows = whole.dim(0), cols = whole.dim(1);
  const int64_t part_rows = dim == 0 ? rows / parts : rows;
  const int64_t part_cols = dim == 1 ? cols / parts : cols;
  const int64_t row0 = dim == 0 ? index * part_rows : 0;
  const int64_t col0 = dim == 1 ? index * part_cols : 0;
  Tensor part({part_rows, part_cols});
  for (int64_t r = 0; r < part_rows; ++r) {
    const float* from = whole.data() + (row0 + r) * cols + col0;
    std::copy_n(from, part_cols, part.data() + r * part_cols);
  }
  return part;
}

Tensor JoinTensorParallelParts(const float* gathered,
                               const std::vector<int64_t>& whole_shape, int dim,
                               int parts) {
  Tensor whole(whole_shape);
  const int64_t rows = whole_shape[0], cols = whole_shape[1];
  const int64_t part_rows = dim == 0 ? rows / parts : rows;
  const int64_t part_cols = dim == 1 ? cols / parts : cols;
  for (int index = 0; index < parts; ++index) {
    const float* part = gathered + index * part_rows * part_cols;
    const int64_t row0 = dim == 0 ? index * part_rows : 0;
    const int64_t col0 = dim == 1 ? index * part_cols : 0;
    for (int64_t r = 0; r < part_rows; ++r) {
      std::copy_n(part + r * part_cols, part_cols,
                  whole.data() + (row0 + r) * cols + col0);
    }
  }
  return whole;
}

}  // namespace glm
