#include "kernels/cpu/rms_norm.h"

#include <cassert>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {

void RmsNormForward(ConstMatrixView x, const float* w, float eps, MatrixView y,
                    float* rstd) {
  assert(x.rows == y.rows && x.cols == y.cols);
  ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.Row(r);
      double sum_sq = 0;
      for (int64_t c = 0; c < x.cols; ++c) sum_sq += double{in[c]} * in[c];
      const float inv =
          1.f / std::sqrt(static_cast<float>(sum_sq / x.cols) + eps);
      float* out = y.Row(r);
      for (int64_t c = 0; c < x.cols; ++c) out[c] = w[c] * (in[c] * inv);
      if (rstd) rstd[r] = inv;
    }
  });
}

void RmsNormBackward(ConstMatrixView x, const float* w, const float* rstd,
                     ConstMatrixView dy, ConstMatrixView residual,
                     MatrixView dx, float* dw) {
  assert(residual.empty() ||
         (residual.rows == dx.rows && residual.cols == dx.cols && !dx.empty()));
  const int64_t n = x.cols;
  if (!dx.empty()) {
    ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* in = x.Row(r);
        const float* d = dy.Row(r);
        const float inv = rstd[r];
        // dx = inv * (g - xhat * mean(g . xhat)), g = dy * w, xhat = x * inv.
        double dot = 0;
        for (int64_t c = 0; c < n; ++c)
          dot += double{d[c]} * w[c] * in[c] * inv;
        const float mean_dot = static_cast<float>(dot / n);
        float* out = dx.Row(r);
        const float* base = residual.empty() ? out : residual.Row(r);
        for (int64_t c = 0; c < n; ++c) {
          out[c] = base[c] + inv * (d[c] * w[c] - in[c] * inv * mean_dot);
        }
      }
    });
  }
  if (dw) {
    ParallelFor(n, x.rows * x.cols, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double acc = 0;
        for (int64_t r = 0; r < x.rows; ++r)
          acc += double{dy.Row(r)[c]} * x.Row(r)[c] * rstd[r];
        dw[c] += static_cast<float>(acc);
      }
    });
  }
}

}  // namespace glm::cpu
