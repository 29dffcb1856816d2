#include "kernels/cpu/elementwise.h"

#include <cassert>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
void Copy(ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::copy(x.Row(r), x.Row(r) + x.cols, y.Row(r));
    }
  });
}

void Zero(MatrixView y) {
  if (y.empty()) return;
  ParallelFor(y.rows, y.rows * y.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::fill(y.Row(r), y.Row(r) + y.cols, 0.f);
    }
  });
}

void Axpy(float alpha, ConstMatrixView x, MatrixView y) {
  assert(x.rows == y.rows && x.cols == y.cols);
  ParallelFor(x.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.Row(r);
      float* out = y.Row(r);
      for (int64_t c = 0; c < x.cols; ++c) out[c] += alpha * in[c];
    }
  });
}

void RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y) {
  assert(x.rows * repeats == y.rows && x.cols == y.cols);
  ParallelFor(y.rows, y.rows * y.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.Row(r / repeats);
      std::copy(in, in + x.cols, y.Row(r));
    }
  });
}

void SumRowGroups(ConstMatrixView x, int64_t repeats, MatrixView y) {
  assert(y.rows * repeats == x.rows && x.cols == y.cols);
  ParallelFor(y.rows, x.rows * x.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* out = y.Row(r);
      for (int64_t i = 0; i < repeats; ++i) {
        const float* in = x.Row(r * repeats + i);
        for (int64_t c = 0; c < x.cols; ++c) out[c] += in[c];
      }
    }
  });
}

}  // namespace glm::cpu
