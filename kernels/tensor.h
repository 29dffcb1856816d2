// Host tensors and the strided matrix views the backend ops work on.
//
// A Tensor has contiguous storage of one dtype with a shape, in host memory
// or on a device (kernels/device_memory.h), its own or a view of an arena
// shared with other tensors (kernels/tensor_arena.h). Ops never see Tensors:
// they take MatrixViews (pointer, rows, cols, row stride, dtype), so a column
// range of a tensor, one head's rows, or one expert's weight slab is passed
// without a copy (as ggml views do). A view points where its tensor lives.
#ifndef GLM_KERNELS_TENSOR_H_
#define GLM_KERNELS_TENSOR_H_

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/device_memory.h"

namespace glm {

// The element types activations come in. Almost everything is F32; a device
// backend that computes its products in bf16 keeps the activations whose
// only readers are products in BF16 (Backend::ActivationType), at half the
// bytes and without a conversion before each product.
enum class ElementType : uint8_t { kF32, kBF16 };

constexpr int64_t ElementBytes(ElementType dtype) {
  return dtype == ElementType::kBF16 ? 2 : 4;
}
inline const char* ElementTypeName(ElementType dtype) {
  return dtype == ElementType::kBF16 ? "bf16" : "f32";
}

// The address `elements` elements of `dtype` past `data`.
template <typename Pointer>
Pointer ElementOffset(Pointer data, int64_t elements, ElementType dtype) {
  if (dtype == ElementType::kF32) return data + elements;
  using Byte =
      std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>,
                         const char, char>;
  return reinterpret_cast<Pointer>(reinterpret_cast<Byte*>(data) +
                                   elements * ElementBytes(dtype));
}

// A row-major matrix inside someone else's storage: element (r, c) is
// element r*stride + c from data. `data` is typed for the common F32 case;
// a BF16 view's elements are 2-byte bf16 values at that address, read only by
// the ops that take BF16 (kernels/backend.h says which; device code reads
// them with kernels/cuda/device_math.cuh's Load and Bf16At), never through
// Row().
struct MatrixView {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  ElementType dtype = ElementType::kF32;

  float* Row(int64_t r) const {
    assert(dtype == ElementType::kF32);
    return data + r * stride;
  }
  bool empty() const { return data == nullptr; }
  bool contiguous() const { return stride == cols; }
  // Columns [start, start + width) of every row.
  MatrixView Columns(int64_t start, int64_t width) const {
    assert(start >= 0 && start + width <= cols);
    return {ElementOffset(data, start, dtype), rows, width, stride, dtype};
  }
  // Rows [start, start + count).
  MatrixView Rows(int64_t start, int64_t count) const {
    assert(start >= 0 && start + count <= rows);
    return {ElementOffset(data, start * stride, dtype), count, cols, stride,
            dtype};
  }
  // The same memory with each row split into `parts` rows of cols/parts (for
  // example [tokens, heads*dim] as [tokens*heads, dim]). Needs a contiguous
  // view.
  MatrixView SplitRows(int64_t parts) const {
    assert(contiguous() && cols % parts == 0);
    return {data, rows * parts, cols / parts, cols / parts, dtype};
  }
  // The inverse of SplitRows: each `parts` consecutive rows as one.
  MatrixView JoinRows(int64_t parts) const {
    assert(contiguous() && rows % parts == 0);
    return {data, rows / parts, cols * parts, cols * parts, dtype};
  }
};

struct ConstMatrixView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  ElementType dtype = ElementType::kF32;

  ConstMatrixView() = default;
  ConstMatrixView(const float* d, int64_t r, int64_t c, int64_t s,
                  ElementType t = ElementType::kF32)
      : data(d), rows(r), cols(c), stride(s), dtype(t) {}
  ConstMatrixView(const MatrixView& v)  // NOLINT: views convert to const views
      : data(v.data),
        rows(v.rows),
        cols(v.cols),
        stride(v.stride),
        dtype(v.dtype) {}

  const float* Row(int64_t r) const {
    assert(dtype == ElementType::kF32);
    return data + r * stride;
  }
  bool empty() const { return data == nullptr; }
  ConstMatrixView Columns(int64_t start, int64_t width) const {
    assert(start >= 0 && start + width <= cols);
    return {ElementOffset(data, start, dtype), rows, width, stride, dtype};
  }
  ConstMatrixView Rows(int64_t start, int64_t count) const {
    assert(start >= 0 && start + count <= rows);
    return {ElementOffset(data, start * stride, dtype), count, cols, stride,
            dtype};
  }
  ConstMatrixView SplitRows(int64_t parts) const {
    assert(stride == cols && cols % parts == 0);
    return {data, rows * parts, cols / parts, cols / parts, dtype};
  }
};

// Rows [start, start + count) of `view`, or `view` itself when it is empty:
// for optional outputs (a gradient nobody asked for) that are split into
// pieces.
inline MatrixView RowsOrEmpty(const MatrixView& view, int64_t start,
                              int64_t count) {
  return view.empty() ? view : view.Rows(start, count);
}
inline ConstMatrixView RowsOrEmpty(const ConstMatrixView& view, int64_t start,
                                   int64_t count) {
  return view.empty() ? view : view.Rows(start, count);
}

// The rows an op reads: x's own, or `count` rows read by index, row p being
// x[rows[p]] times scale[p] (scale null: 1), so that the op reads them where
// they lie instead of from a gathered (and scaled) copy.
struct IndexedRows {
  ConstMatrixView x;
  const int32_t* rows = nullptr;
  const float* scale = nullptr;
  int64_t count = 0;

  IndexedRows() = default;
  IndexedRows(ConstMatrixView view)  // NOLINT: a view is its own rows
      : x(view), count(view.rows) {}
  IndexedRows(MatrixView view)  // NOLINT: a view is its own rows
      : IndexedRows(ConstMatrixView(view)) {}
  IndexedRows(ConstMatrixView view, const int32_t* index, int64_t n,
              const float* row_scale = nullptr)
      : x(view), rows(index), scale(row_scale), count(n) {}

  bool indexed() const { return rows != nullptr; }
};

// `size` contiguous floats [data, data + size) of one allocation, where its
// owner keeps them (host memory or a backend's device): a FloatSpan to write
// them, a ConstFloatSpan to read them.
template <typename Float>
struct BasicFloatSpan {
  Float* data = nullptr;
  int64_t size = 0;
};
using FloatSpan = BasicFloatSpan<float>;
using ConstFloatSpan = BasicFloatSpan<const float>;

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1},
                         [](int64_t a, int64_t b) { return a * b; });
}

// The elements of a tensor: a host vector, a view of a shared host
// allocation (kernels/tensor_arena.h), or a DeviceBuffer from the allocator
// that was current when the tensor was made (kernels/device_memory.h), itself
// perhaps a view of a shared device allocation. Copies stay where the original
// lives and own their elements (a view's copy too).
template <typename T>
class TensorStorage {
 public:
  TensorStorage() = default;
  // `fill` must be 0 or, for integers, -1 when `allocator` is a device.
  // `size` elements in `device` (a view into a shared allocation, say).
  TensorStorage(int64_t size, DeviceBuffer device)
      : size_(size), device_(std::move(device)) {
    assert(device_.bytes() >= size * sizeof(T));
  }
  // `size` elements at `data`, inside the host allocation `host_arena`,
  // which the view keeps alive.
  TensorStorage(int64_t size, std::shared_ptr<void> host_arena, T* data)
      : size_(size), host_arena_(std::move(host_arena)), host_view_(data) {}
  // Elements an op is about to overwrite: on a device nothing is written
  // (no memset) unless `poison`, which fills them with 0xff bytes (NaN for
  // floats, -1 for integers) as host memory always is, so that reading one
  // before it is written shows in the results.
  struct ForOutput {
    bool poison;
  };
  TensorStorage(int64_t size, Allocator* allocator, ForOutput output)
      : size_(size) {
    T poisoned;
    std::memset(&poisoned, 0xff, sizeof(T));
    if (allocator == nullptr) {
      host_.assign(size, poisoned);
      return;
    }
    device_ = DeviceBuffer(allocator, size * sizeof(T));
    if (output.poison && size > 0) {
      allocator->Fill(device_.data(), 0xff, size * sizeof(T));
    }
  }
  TensorStorage(int64_t size, T fill, Allocator* allocator) : size_(size) {
    if (allocator == nullptr) {
      host_.assign(size, fill);
      return;
    }
    device_ = DeviceBuffer(allocator, size * sizeof(T));
    assert(fill == T{0} || fill == T(-1));
    if (size > 0)
      allocator->Fill(device_.data(), fill == T{0} ? 0 : 0xff,
                      size * sizeof(T));
  }
  // A copy of a host view owns its elements, as a device view's copy does
  // (DeviceBuffer).
  TensorStorage(const TensorStorage& other)
      : size_(other.size_), host_(other.host_), device_(other.device_) {
    if (other.host_view()) host_.assign(other.data(), other.data() + size_);
  }
  TensorStorage& operator=(const TensorStorage& other) {
    if (this != &other) *this = TensorStorage(other);
    return *this;
  }
  TensorStorage(TensorStorage&& other) noexcept { *this = std::move(other); }
  TensorStorage& operator=(TensorStorage&& other) noexcept {
    if (this == &other) return *this;
    size_ = std::exchange(other.size_, 0);
    host_ = std::move(other.host_);
    host_arena_ = std::move(other.host_arena_);
    host_view_ = std::exchange(other.host_view_, nullptr);
    device_ = std::move(other.device_);
    return *this;
  }

  // The same elements when they are a view of an arena (no copy);
  // otherwise a copy.
  TensorStorage Alias() const {
    if (host_view()) return TensorStorage(size_, host_arena_, host_view_);
    if (on_host()) return *this;
    return TensorStorage(size_, device_.Alias());
  }

  int64_t size() const { return size_; }
  bool on_host() const { return device_.allocator() == nullptr; }
  Allocator* allocator() const { return device_.allocator(); }
  // The allocation these elements are a view of; null when they own theirs.
  const void* arena() const {
    return host_view() ? host_arena_.get() : device_.shared_data();
  }
  T* data() {
    if (host_view()) return host_view_;
    return on_host() ? host_.data() : static_cast<T*>(device_.data());
  }
  const T* data() const {
    if (host_view()) return host_view_;
    return on_host() ? host_.data() : static_cast<const T*>(device_.data());
  }
  // The elements of host storage that owns them (not a view).
  std::vector<T>& host() {
    assert(on_host() && !host_view());
    return host_;
  }
  const std::vector<T>& host() const {
    assert(on_host() && !host_view());
    return host_;
  }
  void SetZero() {
    if (on_host()) {
      std::fill_n(data(), size_, T{0});
    } else if (size_ > 0) {
      allocator()->Fill(device_.data(), 0, size_ * sizeof(T));
    }
  }
  // Copies `other`'s elements (same size) into this storage, wherever each
  // of the two lives.
  void CopyFrom(const TensorStorage& other) {
    assert(other.size_ == size_);
    const size_t bytes = size_ * sizeof(T);
    if (bytes == 0) return;
    if (on_host() && other.on_host()) {
      std::copy_n(other.data(), size_, data());
    } else if (on_host()) {
      other.allocator()->CopyToHost(data(), other.data(), bytes);
    } else if (other.on_host()) {
      allocator()->CopyFromHost(device_.data(), other.data(), bytes);
    } else {
      assert(allocator() == other.allocator());
      allocator()->CopyWithin(device_.data(), other.data(), bytes);
    }
  }

 private:
  bool host_view() const { return host_arena_ != nullptr; }

  int64_t size_ = 0;
  std::vector<T> host_;
  // Set for a view of a host arena: the allocation and the first element.
  std::shared_ptr<void> host_arena_;
  T* host_view_ = nullptr;
  DeviceBuffer device_;
};

// Contiguous, zero-initialized tensor of one dtype (float32 unless said), in
// host memory or on the current allocator's device: owning, or a view of an
// arena (kernels/tensor_arena.h) whose copies own theirs. A BF16 tensor's
// storage is its bf16 elements packed two to a 32-bit word; only its views
// (Matrix(), Slab()) reach them.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape)
      : Tensor(std::move(shape), CurrentAllocator()) {}
  // `allocator` null: host memory.
  Tensor(std::vector<int64_t> shape, Allocator* allocator,
         ElementType dtype = ElementType::kF32)
      : shape_(std::move(shape)),
        dtype_(dtype),
        storage_(StorageWords(shape_, dtype), 0.f, allocator) {}
  // A float32 tensor whose elements are `device` (kernels/tensor_arena.h),
  // contents as they are.
  Tensor(std::vector<int64_t> shape, DeviceBuffer device)
      : shape_(std::move(shape)),
        storage_(NumElements(shape_), std::move(device)) {}
  // A float32 host tensor whose elements are at `data` in `host_arena`
  // (kernels/tensor_arena.h), contents as they are.
  Tensor(std::vector<int64_t> shape, std::shared_ptr<void> host_arena,
         float* data)
      : shape_(std::move(shape)),
        storage_(NumElements(shape_), std::move(host_arena), data) {}
  // A tensor on the current allocator for an op to overwrite in full (a
  // forward op's output, a gradient an op assigns rather than adds to): not
  // zeroed on a device, which saves a memset per tensor; NaN in host memory
  // (and on a device when GLM_POISON_OUTPUTS=1), so that a read before the
  // write shows in every CPU test.
  static Tensor ForOutput(std::vector<int64_t> shape,
                          ElementType dtype = ElementType::kF32) {
    Tensor t;
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    t.storage_ = TensorStorage<float>(StorageWords(t.shape_, dtype),
                                      CurrentAllocator(), {PoisonOutputs()});
    return t;
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  ElementType dtype() const { return dtype_; }
  // 0 for a default (shapeless) tensor, whose storage is empty.
  int64_t numel() const {
    return storage_.size() == 0 ? 0 : NumElements(shape_);
  }
  bool empty() const { return storage_.size() == 0; }
  bool on_host() const { return storage_.on_host(); }
  // Null for host memory.
  Allocator* allocator() const { return storage_.allocator(); }
  // The allocation this tensor is a view of (kernels/tensor_arena.h), the
  // same for every tensor of that arena; null when it owns its storage.
  const void* arena() const { return storage_.arena(); }
  // The elements of a float32 tensor.
  float* data() {
    assert(dtype_ == ElementType::kF32);
    return storage_.data();
  }
  const float* data() const {
    assert(dtype_ == ElementType::kF32);
    return storage_.data();
  }
  // The storage as 32-bit words, whatever the dtype: what a collective moves
  // (a bf16 tensor travels as pairs of elements).
  float* words() { return storage_.data(); }
  const float* words() const { return storage_.data(); }
  // The elements of a float32 host tensor that owns them: not for a view of
  // an arena (read one through data(), or CopyTo(nullptr).values()).
  std::vector<float>& values() {
    assert(dtype_ == ElementType::kF32);
    return storage_.host();
  }
  const std::vector<float>& values() const {
    assert(dtype_ == ElementType::kF32);
    return storage_.host();
  }
  // The elements of a float32 tensor, copied to a host vector wherever they
  // live (none for a default tensor, which has a shape of one element).
  std::vector<float> HostValues() const {
    return empty() ? std::vector<float>() : CopyTo(nullptr).values();
  }
  void SetZero() { storage_.SetZero(); }
  // A copy of this tensor on `allocator` (null: host memory).
  Tensor CopyTo(Allocator* allocator) const {
    Tensor copy(shape_, allocator, dtype_);
    copy.storage_.CopyFrom(storage_);
    return copy;
  }
  // Copies the elements of `other` (the same number and dtype) into this
  // tensor.
  void CopyFrom(const Tensor& other) {
    assert(other.dtype_ == dtype_);
    storage_.CopyFrom(other.storage_);
  }

  // The tensor as [numel / last dim, last dim].
  MatrixView Matrix() {
    const int64_t cols = shape_.empty() ? 1 : shape_.back();
    return {storage_.data(), numel() / cols, cols, cols, dtype_};
  }
  ConstMatrixView Matrix() const {
    const int64_t cols = shape_.empty() ? 1 : shape_.back();
    return {storage_.data(), numel() / cols, cols, cols, dtype_};
  }
  // Slab i of the leading dimension as a matrix over the last two dimensions
  // (one expert of a fused [E, out, in] weight).
  MatrixView Slab(int64_t i) {
    assert(shape_.size() == 3);
    return Matrix().Rows(i * shape_[1], shape_[1]);
  }
  ConstMatrixView Slab(int64_t i) const {
    assert(shape_.size() == 3);
    return Matrix().Rows(i * shape_[1], shape_[1]);
  }

 private:
  // 32-bit words holding the elements of `shape` in `dtype`.
  static int64_t StorageWords(const std::vector<int64_t>& shape,
                              ElementType dtype) {
    return (NumElements(shape) * ElementBytes(dtype) + 3) / 4;
  }

  std::vector<int64_t> shape_;
  ElementType dtype_ = ElementType::kF32;
  TensorStorage<float> storage_;
};

// Owning int32 tensor (token ids, top-k indices, expert indices). -1 marks "no
// entry".
class IndexTensor {
 public:
  IndexTensor() = default;
  explicit IndexTensor(std::vector<int64_t> shape, int32_t fill = 0)
      : IndexTensor(std::move(shape), fill, CurrentAllocator()) {}
  IndexTensor(std::vector<int64_t> shape, int32_t fill, Allocator* allocator)
      : shape_(std::move(shape)),
        storage_(NumElements(shape_), fill, allocator) {}
  // A tensor whose elements are `device` (kernels/tensor_arena.h).
  IndexTensor(std::vector<int64_t> shape, DeviceBuffer device)
      : shape_(std::move(shape)),
        storage_(NumElements(shape_), std::move(device)) {}
  // `values` as a [values.size()] tensor on the current allocator.
  static IndexTensor FromHost(const std::vector<int32_t>& values) {
    IndexTensor host({static_cast<int64_t>(values.size())}, 0, nullptr);
    host.values() = values;
    return host.CopyTo(CurrentAllocator());
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return storage_.size(); }
  bool empty() const { return storage_.size() == 0; }
  bool on_host() const { return storage_.on_host(); }
  Allocator* allocator() const { return storage_.allocator(); }
  int32_t* data() { return storage_.data(); }
  const int32_t* data() const { return storage_.data(); }
  std::vector<int32_t>& values() { return storage_.host(); }
  const std::vector<int32_t>& values() const { return storage_.host(); }
  void SetZero() { storage_.SetZero(); }
  IndexTensor CopyTo(Allocator* allocator) const {
    IndexTensor copy(shape_, 0, allocator);
    copy.storage_.CopyFrom(storage_);
    return copy;
  }
  // A tensor of the same elements when they are a view of an arena
  // (UploadIndices' tensors): writes through either show in both. Otherwise
  // a copy.
  IndexTensor Alias() const {
    IndexTensor alias;
    alias.shape_ = shape_;
    alias.storage_ = storage_.Alias();
    return alias;
  }
  // The elements, copied to the host when they live on a device.
  std::vector<int32_t> HostValues() const {
    return on_host() ? values() : CopyTo(nullptr).values();
  }

 private:
  std::vector<int64_t> shape_;
  TensorStorage<int32_t> storage_;
};

}  // namespace glm

#endif  // GLM_KERNELS_TENSOR_H_
