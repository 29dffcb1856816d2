#include "model/test_model_util.h"

#include <algorithm>
#include <cfloat>
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

std::vector<std::vector<float>> GradientValues(ModelParameters& params) {
  std::vector<std::vector<float>> grads;
  for (const NamedTensor& t : params.Named()) {
    if (t.grad) grads.push_back(t.grad->HostValues());
  }
  return grads;
}

Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937& rng, float std) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal(0.f, std);
  for (float& v : t.values()) v = normal(rng);
  return t;
}

namespace {

// The finite-difference estimate of one direction at one step, and the float
// rounding it may carry.
struct Estimate {
  double value = 0;
  double rounding = 0;
};

}  // namespace

int ExpectDirectionalGradients(const std::function<double()>& loss,
                               const std::vector<GradientTarget>& targets,
                               double eps, double tol, double abs_tol,
                               const std::function<bool()>& same_decisions) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.f, 1.f);
  int skipped = 0;
  for (const GradientTarget& target : targets) {
    // Host tensors, views of a model's arena or of their own.
    float* values = target.value->data();
    const size_t n = target.value->numel();
    const std::vector<float> saved(values, values + n);
    std::vector<float> direction(n);
    // Loss at saved + step * direction, or nullopt when a decision flipped.
    auto loss_at = [&](double step) -> std::optional<double> {
      for (size_t i = 0; i < n; ++i)
        values[i] = saved[i] + static_cast<float>(step) * direction[i];
      const double value = loss();
      if (same_decisions && !same_decisions()) return std::nullopt;
      return value;
    };
    // Probes at 0, +-h/2 and +-h. Where all four keep the decisions:
    // Richardson's central estimate (4 D(h/2) - D(h)) / 3, error O(h^4).
    // Where only one side keeps them (the point lies near a switch on the
    // other side): the one-sided (-3 L(0) + 4 L(s h/2) - L(s h)) / (s h),
    // error O(h^2), which stays inside the piece the analytic gradient
    // belongs to. Rounding: |L| FLT_EPSILON per evaluation, times the sum of
    // the coefficients' magnitudes.
    auto estimate_at = [&](double h) -> std::optional<Estimate> {
      const double base = loss_at(0).value_or(0.0);
      std::optional<double> at[2][2];  // [side: +, -][h/2, h]
      double magnitude = std::abs(base);
      for (int side = 0; side < 2; ++side) {
        for (int full = 0; full < 2; ++full) {
          at[side][full] = loss_at((side ? -h : h) / (full ? 1 : 2));
          if (at[side][full])
            magnitude = std::max(magnitude, std::abs(*at[side][full]));
        }
      }
      const double rounding = magnitude * FLT_EPSILON / h;
      const bool plus = at[0][0] && at[0][1], minus = at[1][0] && at[1][1];
      if (plus && minus) {
        const double d_half = (*at[0][0] - *at[1][0]) / h;
        const double d_full = (*at[0][1] - *at[1][1]) / (2 * h);
        return Estimate{(4 * d_half - d_full) / 3, 3 * rounding};
      }
      if (!plus && !minus) return std::nullopt;
      const int side = plus ? 0 : 1;
      const double s = plus ? h : -h;
      return Estimate{(-3 * base + 4 * *at[side][0] - *at[side][1]) / s,
                      8 * rounding};
    };
    bool checked = false;
    for (int k = 0; k < kDirectionsPerTarget && !checked; ++k) {
      double analytic = 0;
      for (size_t i = 0; i < n; ++i) {
        direction[i] = normal(rng);
        analytic += double{direction[i]} * target.grad->data()[i];
      }
      for (double h : {eps, eps / 4, eps / 16}) {
        const std::optional<Estimate> numeric = estimate_at(h);
        if (!numeric) continue;
        checked = true;
        EXPECT_NEAR(
            analytic, numeric->value,
            tol * std::max(std::abs(numeric->value), std::abs(analytic)) +
                abs_tol + numeric->rounding)
            << target.name << " (step " << h << ")";
        break;
      }
      if (!checked) ++skipped;
    }
    std::copy(saved.begin(), saved.end(), values);
    EXPECT_TRUE(checked) << target.name << ": every direction and step (" << eps
                         << " to " << eps / 16
                         << ") changed a discrete decision";
  }
  const int allowed = std::max<int>(1, targets.size() / 8);
  EXPECT_LE(skipped, allowed)
      << "directions skipped: a discrete decision changed at every step";
  return skipped;
}

}  // namespace glm
