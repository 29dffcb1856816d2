#include "model/test_model_util.h"

#include <cmath>
#include <optional>

#include "gtest/gtest.h"

namespace glm {

ModelConfig TinyTestConfig() {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 2;
  c.q_lora_rank = 12;
  c.kv_lora_rank = 8;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 6;
  c.intermediate_size = 24;
  c.first_k_dense_replace = 1;
  c.n_routed_experts = 4;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 8;
  c.routed_scaling_factor = 2.5;
  c.n_group = 2;
  c.topk_group = 1;
  c.norm_topk_prob = true;
  c.rms_norm_eps = 1e-5;
  c.index_n_heads = 2;
  c.index_head_dim = 8;
  c.index_topk = 3;
  c.index_sharing = IndexSharing{2, 2};
  c.num_mtp_layers = 1;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 64;
  c.torch_dtype = "float32";
  return c;
}

Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937& rng, float std) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal(0.f, std);
  for (float& v : t.values()) v = normal(rng);
  return t;
}

void ExpectDirectionalGradients(const std::function<double()>& loss,
                                const std::vector<GradientTarget>& targets,
                                double eps, double tol, double abs_tol,
                                const std::function<bool()>& same_decisions) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const GradientTarget& target : targets) {
    std::vector<float>& values = target.value->values();
    const std::vector<float> saved = values;
    std::vector<float> direction(values.size());
    double analytic = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      direction[i] = normal(rng);
      analytic += double{direction[i]} * target.grad->values()[i];
    }
    // Loss at saved + step * direction, or nullopt when a decision flipped.
    auto loss_at = [&](double step) -> std::optional<double> {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = saved[i] + static_cast<float>(step) * direction[i];
      const double value = loss();
      if (same_decisions && !same_decisions()) return std::nullopt;
      return value;
    };
    double step = eps;
    std::optional<double> numeric;
    for (int attempt = 0; attempt <= 10 && !numeric; ++attempt, step /= 2) {
      const std::optional<double> plus = loss_at(step);
      const std::optional<double> minus = loss_at(-step);
      if (plus && minus) numeric = (*plus - *minus) / (2 * step);
    }
    values = saved;
    ASSERT_TRUE(numeric.has_value())
        << target.name << ": every step changed a discrete decision";
    EXPECT_NEAR(
        analytic, *numeric,
        tol * std::max(std::abs(*numeric), std::abs(analytic)) + abs_tol)
        << target.name << " (step " << step * 2 << ")";
  }
}

}  // namespace glm
