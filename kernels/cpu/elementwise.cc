#include "kernels/cpu/elementwise.h"

#include <cassert>

namespace glm::cpu {
void Copy(ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    std::copy(x.Row(r), x.Row(r) + x.cols, y.Row(r));
  }
}

void Axpy(float alpha, ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* in = x.Row(r);
    float* out = y.Row(r);
    for (int64_t c = 0; c < x.cols; ++c) out[c] += alpha * in[c];
  }
}

}  // namespace glm::cpu
