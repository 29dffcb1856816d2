#include "kernels/cpu/router.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

// Indices of the k largest values, largest first; ties go to the lower index.
std::vector<int> TopIndices(const std::vector<float>& values, int k) {
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(
      order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        return values[a] > values[b] || (values[a] == values[b] && a < b);
      });
  order.resize(k);
  return order;
}

}  // namespace

void RouterForward(ConstMatrixView logits, const float* bias,
                   const RouterSpec& spec, MatrixView scores,
                   MatrixView weights, int32_t* indices) {
  const int64_t experts = logits.cols;
  const int64_t per_group = experts / spec.n_group;
  assert(experts % spec.n_group == 0 && weights.cols == spec.top_k);
  ParallelFor(
      logits.rows, logits.rows * logits.cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          float* s = scores.Row(r);
          std::vector<float> choice(experts);
          for (int64_t e = 0; e < experts; ++e) {
            s[e] = 1.f / (1.f + std::exp(-logits.Row(r)[e]));
            choice[e] = s[e] + bias[e];
          }
          if (spec.n_group > 1) {
            // Group score = sum of the two best choice scores in the group.
            std::vector<float> group_score(spec.n_group);
            for (int g = 0; g < spec.n_group; ++g) {
              std::vector<float> members(choice.begin() + g * per_group,
                                         choice.begin() + (g + 1) * per_group);
              const std::vector<int> best =
                  TopIndices(members, std::min<int>(2, per_group));
              group_score[g] = 0;
              for (int i : best) group_score[g] += members[i];
            }
            std::vector<bool> kept(spec.n_group, false);
            for (int g : TopIndices(group_score, spec.topk_group))
              kept[g] = true;
            for (int64_t e = 0; e < experts; ++e) {
              if (!kept[e / per_group]) choice[e] = -INFINITY;
            }
          }
          const std::vector<int> chosen = TopIndices(choice, spec.top_k);
          double sum = 0;
          for (int i = 0; i < spec.top_k; ++i) sum += s[chosen[i]];
          const float denom =
              spec.norm_topk_prob ? static_cast<float>(sum) + 1e-20f : 1.f;
          for (int i = 0; i < spec.top_k; ++i) {
            indices[r * spec.top_k + i] = chosen[i];
            weights.Row(r)[i] =
                s[chosen[i]] / denom * spec.routed_scaling_factor;
          }
        }
      });
}

void RouterBackward(ConstMatrixView scores, const int32_t* indices,
                    ConstMatrixView dweights, const RouterSpec& spec,
                    MatrixView dlogits) {
  ParallelFor(
      scores.rows, scores.rows * scores.cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int32_t* chosen = indices + r * spec.top_k;
          const float* s = scores.Row(r);
          const float* dw = dweights.Row(r);
          // w_i = c * s_i / S with S = sum_j s_j (+ 1e-20): ds_i = c (dw_i / S
          // - sum_j dw_j s_j / S^2).
          double sum = 0, dot = 0;
          for (int i = 0; i < spec.top_k; ++i) {
            sum += s[chosen[i]];
            dot += double{dw[i]} * s[chosen[i]];
          }
          for (int i = 0; i < spec.top_k; ++i) {
            const int e = chosen[i];
            double ds = dw[i];
            if (spec.norm_topk_prob) {
              const double denom = sum + 1e-20;
              ds = dw[i] / denom - dot / (denom * denom);
            }
            ds *= spec.routed_scaling_factor;
            dlogits.Row(r)[e] += static_cast<float>(ds * s[e] * (1.0 - s[e]));
          }
        }
      });
}

}  // namespace glm::cpu
