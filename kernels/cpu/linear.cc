#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <vector>

namespace glm::cpu {

void LinearForward(ConstMatrixView x, ConstMatrixView w, MatrixView y,
                   bool accumulate) {
  assert(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows);
  if (x.rows == 0 || w.rows == 0) return;
  if (x.cols == 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < y.rows; ++r)
        std::fill(y.Row(r), y.Row(r) + y.cols, 0.f);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, x.rows, w.rows, x.cols,
              1.f, x.data, x.stride, w.data, w.stride, accumulate ? 1.f : 0.f,
              y.data, y.stride);
}

void LinearBackward(ConstMatrixView x, ConstMatrixView w, ConstMatrixView dy,
                    MatrixView dx, MatrixView dw) {
  assert(dy.rows == x.rows && dy.cols == w.rows);
  if (x.rows == 0 || w.rows == 0 || x.cols == 0) return;
  if (!dx.empty()) {
    assert(dx.rows == x.rows && dx.cols == x.cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dy.rows, w.cols,
                dy.cols, 1.f, dy.data, dy.stride, w.data, w.stride, 1.f,
                dx.data, dx.stride);
  }
  if (!dw.empty()) {
    assert(dw.rows == w.rows && dw.cols == w.cols);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w.rows, x.cols, x.rows,
                1.f, dy.data, dy.stride, x.data, x.stride, 1.f, dw.data,
                dw.stride);
  }
}

namespace {

// Rows of expert e's weight in a stacked [experts * out, in] matrix.
template <typename View>
View ExpertWeight(View w, int64_t experts, int64_t e) {
  const int64_t out = w.rows / experts;
  return w.Rows(e * out, out);
}

// Expert rows [first, first + rows): x's own, or the indexed rows (times
// their scales) copied into *storage (one expert's rows, not all of them, at
// a time).
ConstMatrixView ExpertRows(const IndexedRows& x, int64_t first, int64_t rows,
                           std::vector<float>* storage) {
  if (!x.indexed()) return x.x.Rows(first, rows);
  storage->resize(rows * x.x.cols);
  for (int64_t p = 0; p < rows; ++p) {
    const int32_t from = x.rows[first + p];
    assert(from >= 0 && from < x.x.rows);
    const float* in = x.x.Row(from);
    float* out = storage->data() + p * x.x.cols;
    if (x.scale == nullptr) {
      std::copy(in, in + x.x.cols, out);
      continue;
    }
    const float s = x.scale[first + p];
    for (int64_t c = 0; c < x.x.cols; ++c) out[c] = s * in[c];
  }
  return {storage->data(), rows, x.x.cols, x.x.cols};
}

}  // namespace

void GroupedLinearForward(IndexedRows x, ConstMatrixView w,
                          const int32_t* offsets, int64_t experts,
                          MatrixView y) {
  assert(w.rows % experts == 0 && y.rows == offsets[experts]);
  std::vector<float> gathered;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[e], rows = offsets[e + 1] - first;
    if (rows == 0) continue;
    LinearForward(ExpertRows(x, first, rows, &gathered),
                  ExpertWeight(w, experts, e), y.Rows(first, rows), false);
  }
}

void GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                           const int32_t* offsets, int64_t experts,
                           IndexedRows dy, MatrixView dx, MatrixView dw) {
  assert(w.rows % experts == 0 && dy.count == offsets[experts]);
  std::vector<float> gathered, gathered_dy;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[e], rows = offsets[e + 1] - first;
    if (rows == 0) continue;
    LinearBackward(
        ExpertRows(x, first, rows, &gathered), ExpertWeight(w, experts, e),
        ExpertRows(dy, first, rows, &gathered_dy), RowsOrEmpty(dx, first, rows),
        dw.empty() ? MatrixView{} : ExpertWeight(dw, experts, e));
  }
}

}  // namespace glm::cpu
