#include "kernels/cpu/indexer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

// sum_h w[t,h] relu(scale * iq[t,h] . ik[s]).
float IndexScore(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                 int64_t t, int64_t s, float scale) {
  const int64_t heads = w.cols;
  float total = 0.f;
  for (int64_t h = 0; h < heads; ++h) {
    const float* query = iq.Row(t * heads + h);
    const float* key = ik.Row(s);
    float dot = 0.f;
    for (int64_t c = 0; c < ik.cols; ++c) dot += query[c] * key[c];
    total += w.Row(t)[h] * std::max(scale * dot, 0.f);
  }
  return total;
}

}  // namespace

void IndexerTopK(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                 const int32_t* seq_start, int64_t query_offset, int64_t topk,
                 float scale, int32_t* keys) {
  const int64_t nq = w.rows, nk = ik.rows;
  assert(iq.rows == nq * w.cols && iq.cols == ik.cols);
  assert(query_offset >= 0 && query_offset + nq <= nk);
  const int64_t heads = w.cols, dim = ik.cols;
  // Keys transposed [dim, nk], so each query's dot products with all its keys
  // run along contiguous memory (vectorized), summed over dim in the same order
  // as IndexScore.
  std::vector<float> keys_t(dim * nk);
  for (int64_t s = 0; s < nk; ++s)
    for (int64_t c = 0; c < dim; ++c) keys_t[c * nk + s] = ik.Row(s)[c];
  ParallelFor(nq, nq * nk * heads * dim / 2, [&](int64_t begin, int64_t end) {
    std::vector<float> score, dot;
    for (int64_t i = begin; i < end; ++i) {
      // Causal rows grow with t: pairing early and late queries (0, nq-1, 1,
      // nq-2, ...) gives every contiguous chunk about the same work.
      const int64_t t = i % 2 == 0 ? i / 2 : nq - 1 - i / 2;
      const int64_t first = seq_start[t];
      const int64_t count = query_offset + t - first + 1;
      score.assign(count, 0.f);
      for (int64_t h = 0; h < heads; ++h) {
        const float* query = iq.Row(t * heads + h);
        dot.assign(count, 0.f);
        for (int64_t c = 0; c < dim; ++c) {
          const float q = query[c];
          const float* key_c = keys_t.data() + c * nk + first;
          for (int64_t s = 0; s < count; ++s) dot[s] += q * key_c[s];
        }
        const float weight = w.Row(t)[h];
        for (int64_t s = 0; s < count; ++s) {
          score[s] += weight * std::max(scale * dot[s], 0.f);
        }
      }
      std::vector<int32_t> order(count);
      std::iota(order.begin(), order.end(), 0);
      const int64_t kept = std::min(topk, count);
      std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                        [&](int32_t a, int32_t b) {
                          return score[a] > score[b] ||
                                 (score[a] == score[b] && a < b);
                        });
      int32_t* out = keys + t * topk;
      for (int64_t j = 0; j < topk; ++j) {
        out[j] = j < kept ? static_cast<int32_t>(first + order[j]) : -1;
      }
    }
  });
}

double IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                     const int32_t* keys, int64_t topk, float scale,
                     ConstMatrixView target_weights, float coeff,
                     MatrixView diq, MatrixView dik, MatrixView dw) {
  // n queries (w's rows); keys index ik's rows.
  const int64_t n = w.rows, heads = w.cols, dim = ik.cols;
  const float grad_scale = coeff / static_cast<float>(n);
  std::vector<double> row_loss(n, 0.0);
  // d loss / d (iq[t,h] . ik[s]) per (t, h, j), for the key pass below.
  std::vector<float> dot_grad(n * heads * topk, 0.f);
  ParallelFor(n, n * topk * heads * dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int32_t* selected = keys + t * topk;
      std::vector<double> z(topk, -INFINITY), target(topk, 0.0);
      double max = -INFINITY, mass = 0;
      for (int64_t j = 0; j < topk; ++j) {
        if (selected[j] < 0) continue;
        z[j] = IndexScore(iq, ik, w, t, selected[j], scale);
        max = std::max(max, z[j]);
        target[j] = target_weights.Row(t)[j];
        mass += target[j];
      }
      double sum = 0;
      for (int64_t j = 0; j < topk; ++j) {
        if (selected[j] >= 0) sum += std::exp(z[j] - max);
      }
      const double log_sum = max + std::log(sum);
      for (int64_t j = 0; j < topk; ++j) {
        if (selected[j] < 0) continue;
        const double log_p = z[j] - log_sum;
        const double q = target[j] / mass;
        if (q > 0) row_loss[t] += q * (std::log(q) - log_p);
        // d KL / d z_j = p_j - q_j (q sums to one).
        const float dz = grad_scale * static_cast<float>(std::exp(log_p) - q);
        for (int64_t h = 0; h < heads; ++h) {
          const float* query = iq.Row(t * heads + h);
          const float* key = ik.Row(selected[j]);
          float dot = 0.f;
          for (int64_t c = 0; c < dim; ++c) dot += query[c] * key[c];
          if (!dw.empty()) dw.Row(t)[h] += dz * std::max(scale * dot, 0.f);
          if (scale * dot <= 0.f) continue;
          const float g = dz * w.Row(t)[h] * scale;
          dot_grad[(t * heads + h) * topk + j] = g;
          if (!diq.empty()) {
            float* out = diq.Row(t * heads + h);
            for (int64_t c = 0; c < dim; ++c) out[c] += g * key[c];
          }
        }
      }
    }
  });
  if (!dik.empty()) {
    // Keys are shared by many queries: split by column so each thread owns its
    // sums.
    ParallelFor(dim, n * heads * topk * dim, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            const float q = iq.Row(t * heads + h)[c];
            for (int64_t j = 0; j < topk; ++j) {
              const float g = dot_grad[(t * heads + h) * topk + j];
              if (g != 0.f) dik.Row(keys[t * topk + j])[c] += g * q;
            }
          }
        }
      }
    });
  }
  double total = 0;
  for (double l : row_loss) total += l;
  return coeff * total / static_cast<double>(n);
}

}  // namespace glm::cpu
