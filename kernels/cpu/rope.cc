#include "kernels/cpu/rope.h"

#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

// Float32 inverse frequencies, as transformers computes them.
std::vector<float> InverseFrequencies(int64_t rotary_dim, float theta) {
  std::vector<float> inv(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    inv[i] = 1.f / std::pow(theta, static_cast<float>(2 * i) /
                                       static_cast<float>(rotary_dim));
  }
  return inv;
}

}  // namespace

void RopeForward(ConstMatrixView x, const int32_t* positions,
                 int64_t rows_per_position, float theta, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols && x.cols % 2 == 0);
  const int64_t half = x.cols / 2;
  const std::vector<float> inv = InverseFrequencies(x.cols, theta);
  ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float pos = static_cast<float>(positions[r / rows_per_position]);
      const float* in = x.Row(r);
      float* out = y.Row(r);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv[i];
        const float c = std::cos(angle), s = std::sin(angle);
        const float x0 = in[2 * i], x1 = in[2 * i + 1];
        out[i] = x0 * c - x1 * s;
        out[half + i] = x1 * c + x0 * s;
      }
    }
  });
}

void RopeBackward(ConstMatrixView dy, const int32_t* positions,
                  int64_t rows_per_position, float theta, MatrixView dx) {
  assert(dx.rows == dy.rows && dx.cols == dy.cols);
  const int64_t half = dy.cols / 2;
  const std::vector<float> inv = InverseFrequencies(dy.cols, theta);
  ParallelFor(dy.rows, dy.rows * dy.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float pos = static_cast<float>(positions[r / rows_per_position]);
      const float* d = dy.Row(r);
      float* out = dx.Row(r);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv[i];
        const float c = std::cos(angle), s = std::sin(angle);
        const float d0 = d[i], d1 = d[half + i];
        out[2 * i] = d0 * c + d1 * s;
        out[2 * i + 1] = -d0 * s + d1 * c;
      }
    }
  });
}

}  // namespace glm::cpu
