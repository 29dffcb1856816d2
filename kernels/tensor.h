// Host tensors and the strided matrix views the backend ops work on.
//
// A Tensor owns contiguous float32 storage with a shape. Ops never see Tensors:
// they take MatrixViews (pointer, rows, cols, row stride), so a column range of
// a tensor, one head's rows, or one expert's weight slab is passed without a
// copy (as ggml views do).
#ifndef GLM_KERNELS_TENSOR_H_
#define GLM_KERNELS_TENSOR_H_

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <numeric>
#include <vector>

namespace glm {

// A row-major matrix inside someone else's storage: element (r, c) is
// data[r*stride + c].
struct MatrixView {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  float* Row(int64_t r) const { return data + r * stride; }
  bool empty() const { return data == nullptr; }
  bool contiguous() const { return stride == cols; }
  // Columns [start, start + width) of every row.
  MatrixView Columns(int64_t start, int64_t width) const {
    assert(start >= 0 && start + width <= cols);
    return {data + start, rows, width, stride};
  }
  // Rows [start, start + count).
  MatrixView Rows(int64_t start, int64_t count) const {
    assert(start >= 0 && start + count <= rows);
    return {data + start * stride, count, cols, stride};
  }
  // The same memory with each row split into `parts` rows of cols/parts (for
  // example [tokens, heads*dim] as [tokens*heads, dim]). Needs a contiguous
  // view.
  MatrixView SplitRows(int64_t parts) const {
    assert(contiguous() && cols % parts == 0);
    return {data, rows * parts, cols / parts, cols / parts};
  }
};

struct ConstMatrixView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  ConstMatrixView() = default;
  ConstMatrixView(const float* d, int64_t r, int64_t c, int64_t s)
      : data(d), rows(r), cols(c), stride(s) {}
  ConstMatrixView(const MatrixView& v)  // NOLINT: views convert to const views
      : data(v.data), rows(v.rows), cols(v.cols), stride(v.stride) {}

  const float* Row(int64_t r) const { return data + r * stride; }
  bool empty() const { return data == nullptr; }
  ConstMatrixView Columns(int64_t start, int64_t width) const {
    assert(start >= 0 && start + width <= cols);
    return {data + start, rows, width, stride};
  }
  ConstMatrixView Rows(int64_t start, int64_t count) const {
    assert(start >= 0 && start + count <= rows);
    return {data + start * stride, count, cols, stride};
  }
  ConstMatrixView SplitRows(int64_t parts) const {
    assert(stride == cols && cols % parts == 0);
    return {data, rows * parts, cols / parts, cols / parts};
  }
};

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1},
                         [](int64_t a, int64_t b) { return a * b; });
}

// Owning, contiguous, zero-initialized float32 tensor.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape)
      : shape_(std::move(shape)), data_(NumElements(shape_), 0.f) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& values() { return data_; }
  const std::vector<float>& values() const { return data_; }
  void SetZero() { std::fill(data_.begin(), data_.end(), 0.f); }

  // The tensor as [numel / last dim, last dim].
  MatrixView Matrix() {
    const int64_t cols = shape_.empty() ? 1 : shape_.back();
    return {data(), numel() / cols, cols, cols};
  }
  ConstMatrixView Matrix() const {
    const int64_t cols = shape_.empty() ? 1 : shape_.back();
    return {data(), numel() / cols, cols, cols};
  }
  // Slab i of the leading dimension as a matrix over the last two dimensions
  // (one expert of a fused [E, out, in] weight).
  MatrixView Slab(int64_t i) {
    assert(shape_.size() == 3);
    return {data() + i * shape_[1] * shape_[2], shape_[1], shape_[2],
            shape_[2]};
  }
  ConstMatrixView Slab(int64_t i) const {
    assert(shape_.size() == 3);
    return {data() + i * shape_[1] * shape_[2], shape_[1], shape_[2],
            shape_[2]};
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

// Owning int32 tensor (token ids, top-k indices, expert indices). -1 marks "no
// entry".
class IndexTensor {
 public:
  IndexTensor() = default;
  explicit IndexTensor(std::vector<int64_t> shape, int32_t fill = 0)
      : shape_(std::move(shape)), data_(NumElements(shape_), fill) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }
  int32_t* data() { return data_.data(); }
  const int32_t* data() const { return data_.data(); }
  std::vector<int32_t>& values() { return data_; }
  const std::vector<int32_t>& values() const { return data_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<int32_t> data_;
};

}  // namespace glm

#endif  // GLM_KERNELS_TENSOR_H_
