#include "kernels/cpu/sparse_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                            ConstMatrixView v, const int32_t* keys,
                            int64_t topk, int64_t heads, float scale,
                            MatrixView out, MatrixView probs) {
  assert(q.cols == k.cols && k.rows == v.rows && k.rows % heads == 0);
  assert(out.rows == q.rows && out.cols == v.cols && probs.cols == topk);
  ParallelFor(q.rows, q.rows * topk * (q.cols + v.cols),
              [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  const int64_t t = row / heads, h = row % heads;
                  const int32_t* selected = keys + t * topk;
                  float* p = probs.Row(row);
                  float max = -INFINITY;
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) continue;
                    p[j] = scale * Dot(q.Row(row),
                                       k.Row(selected[j] * heads + h), q.cols);
                    max = std::max(max, p[j]);
                  }
                  double sum = 0;
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) {
                      p[j] = 0.f;
                      continue;
                    }
                    p[j] = std::exp(p[j] - max);
                    sum += p[j];
                  }
                  float* o = out.Row(row);
                  std::fill(o, o + v.cols, 0.f);
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) continue;
                    p[j] = static_cast<float>(p[j] / sum);
                    const float* value = v.Row(selected[j] * heads + h);
                    for (int64_t c = 0; c < v.cols; ++c)
                      o[c] += p[j] * value[c];
                  }
                }
              });
}

void SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                             ConstMatrixView v, const int32_t* keys,
                             int64_t topk, int64_t heads, float scale,
                             ConstMatrixView probs, ConstMatrixView dout,
                             MatrixView dq, MatrixView dk, MatrixView dv) {
  // Pass 1, per query row: score gradients and dq.
  std::vector<float> dscore(q.rows * topk, 0.f);
  ParallelFor(
      q.rows, q.rows * topk * (q.cols + v.cols),
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t t = row / heads, h = row % heads;
          const int32_t* selected = keys + t * topk;
          const float* p = probs.Row(row);
          float* ds = dscore.data() + row * topk;
          double weighted = 0;
          for (int64_t j = 0; j < topk; ++j) {
            if (selected[j] < 0) continue;
            ds[j] = Dot(dout.Row(row), v.Row(selected[j] * heads + h), v.cols);
            weighted += double{p[j]} * ds[j];
          }
          for (int64_t j = 0; j < topk; ++j) {
            if (selected[j] < 0) continue;
            ds[j] = p[j] * (ds[j] - static_cast<float>(weighted)) * scale;
            if (dq.empty()) continue;
            const float* key = k.Row(selected[j] * heads + h);
            float* g = dq.Row(row);
            for (int64_t c = 0; c < q.cols; ++c) g[c] += ds[j] * key[c];
          }
        }
      });
  // Pass 2, one head per thread: keys and values of a head are written only by
  // it, in query order, so the sums are deterministic without atomics.
  ParallelFor(heads, q.rows * topk * (q.cols + v.cols),
              [&](int64_t begin, int64_t end) {
                for (int64_t h = begin; h < end; ++h) {
                  for (int64_t t = 0; t < q.rows / heads; ++t) {
                    const int64_t row = t * heads + h;
                    const int32_t* selected = keys + t * topk;
                    for (int64_t j = 0; j < topk; ++j) {
                      if (selected[j] < 0) continue;
                      const int64_t key_row = selected[j] * heads + h;
                      if (!dk.empty()) {
                        const float ds = dscore[row * topk + j];
                        const float* query = q.Row(row);
                        float* g = dk.Row(key_row);
                        for (int64_t c = 0; c < q.cols; ++c)
                          g[c] += ds * query[c];
                      }
                      if (!dv.empty()) {
                        const float p = probs.Row(row)[j];
                        const float* d = dout.Row(row);
                        float* g = dv.Row(key_row);
                        for (int64_t c = 0; c < v.cols; ++c) g[c] += p * d[c];
                      }
                    }
                  }
                }
              });
}

}  // namespace glm::cpu
