#include "kernels/cpu/layer_norm.h"

#include <cassert>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {

void LayerNormForward(ConstMatrixView x, const float* w, const float* b,
                      float eps, MatrixView y, float* mean, float* rstd) {
  assert(x.rows == y.rows && x.cols == y.cols);
  const int64_t n = x.cols;
  ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.Row(r);
      double sum = 0;
      for (int64_t c = 0; c < n; ++c) sum += in[c];
      const double mu = sum / n;
      double var = 0;
      for (int64_t c = 0; c < n; ++c) var += (in[c] - mu) * (in[c] - mu);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / n + eps));
      float* out = y.Row(r);
      for (int64_t c = 0; c < n; ++c) {
        out[c] = (in[c] - static_cast<float>(mu)) * inv * w[c] + b[c];
      }
      mean[r] = static_cast<float>(mu);
      rstd[r] = inv;
    }
  });
}

void LayerNormBackward(ConstMatrixView x, const float* w, const float* mean,
                       const float* rstd, ConstMatrixView dy, MatrixView dx,
                       float* dw, float* db) {
  const int64_t n = x.cols;
  if (!dx.empty()) {
    ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* in = x.Row(r);
        const float* d = dy.Row(r);
        // dx = rstd * (g - mean(g) - xhat * mean(g . xhat)), g = dy * w.
        double sum_g = 0, sum_gx = 0;
        for (int64_t c = 0; c < n; ++c) {
          const double g = double{d[c]} * w[c];
          sum_g += g;
          sum_gx += g * (in[c] - mean[r]) * rstd[r];
        }
        const float mg = static_cast<float>(sum_g / n);
        const float mgx = static_cast<float>(sum_gx / n);
        float* out = dx.Row(r);
        for (int64_t c = 0; c < n; ++c) {
          const float xhat = (in[c] - mean[r]) * rstd[r];
          out[c] += rstd[r] * (d[c] * w[c] - mg - xhat * mgx);
        }
      }
    });
  }
  ParallelFor(n, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double acc_w = 0, acc_b = 0;
      for (int64_t r = 0; r < x.rows; ++r) {
        const float d = dy.Row(r)[c];
        acc_w += double{d} * (x.Row(r)[c] - mean[r]) * rstd[r];
        acc_b += d;
      }
      if (dw) dw[c] += static_cast<float>(acc_w);
      if (db) db[c] += static_cast<float>(acc_b);
    }
  });
}

}  // namespace glm::cpu
