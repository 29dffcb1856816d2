#include "kernels/cpu/swiglu.h"

#include <cassert>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

void SwiGluForward(ConstMatrixView gate, ConstMatrixView up, MatrixView out) {
  assert(gate.rows == up.rows && gate.cols == up.cols);
  assert(out.rows == gate.rows && out.cols == gate.cols);
  ParallelFor(gate.rows, gate.rows * gate.cols,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const float* g = gate.Row(r);
                  const float* u = up.Row(r);
                  float* o = out.Row(r);
                  for (int64_t c = 0; c < gate.cols; ++c)
                    o[c] = g[c] * Sigmoid(g[c]) * u[c];
                }
              });
}

void SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                    ConstMatrixView dout, MatrixView dgate, MatrixView dup) {
  ParallelFor(
      gate.rows, gate.rows * gate.cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* g = gate.Row(r);
          const float* u = up.Row(r);
          const float* d = dout.Row(r);
          for (int64_t c = 0; c < gate.cols; ++c) {
            const float s = Sigmoid(g[c]);
            const float silu = g[c] * s;
            // d silu / dg = s * (1 + g * (1 - s)).
            if (!dgate.empty())
              dgate.Row(r)[c] = d[c] * u[c] * s * (1.f + g[c] * (1.f - s));
            if (!dup.empty()) dup.Row(r)[c] = d[c] * silu;
          }
        }
      });
}

}  // namespace glm::cpu
