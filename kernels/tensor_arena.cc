#include "kernels/tensor_arena.h"

#include <algorithm>
#include <cassert>
#include <memory>
#include <utility>

namespace glm {
namespace {

// Views of one new allocation with `shapes`, contents undefined.
std::vector<Tensor> Carve(Allocator* allocator,
                          const std::vector<std::vector<int64_t>>& shapes,
                          ArenaRange* range) {
  assert(allocator != nullptr);
  int64_t total = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    total += ArenaBytes(NumElements(shape));
  }
  std::vector<Tensor> tensors;
  *range = {};
  if (total == 0) {
    for (const std::vector<int64_t>& shape : shapes) {
      tensors.emplace_back(shape, allocator);
    }
    return tensors;
  }
  tensors.resize(shapes.size());
  auto shared = std::make_shared<const DeviceBuffer>(allocator, total);
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t elements = NumElements(shapes[i]);
    if (elements == 0) {
      tensors[i] = Tensor(shapes[i], allocator);
      continue;
    }
    tensors[i] = Tensor(
        shapes[i], DeviceBuffer::ViewOf(shared, offset,
                                        elements * int64_t{sizeof(float)}));
    offset += ArenaBytes(elements);
  }
  *range = {allocator, static_cast<float*>(shared->data()),
            total / int64_t{sizeof(float)}};
  return tensors;
}

}  // namespace

int64_t ArenaBytes(int64_t elements) {
  // Where tensors start: aligned for vectorized loads and TMA.
  constexpr int64_t kAlignBytes = 256;
  const int64_t bytes = elements * int64_t{sizeof(float)};
  return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
}

TensorSpans SpansOf(const std::vector<Tensor*>& tensors) {
  TensorSpans out;
  const Tensor* previous = nullptr;  // the last tensor of out.spans.back()
  for (Tensor* tensor : tensors) {
    if (tensor->empty()) continue;
    if (tensor->arena() == nullptr) {
      out.owning.push_back(tensor);
      continue;
    }
    const float* after_previous =
        previous == nullptr ? nullptr
                            : previous->data() + ArenaBytes(previous->numel()) /
                                                     int64_t{sizeof(float)};
    if (previous != nullptr && previous->arena() == tensor->arena() &&
        tensor->data() == after_previous) {
      out.spans.back().size =
          tensor->data() + tensor->numel() - out.spans.back().data;
    } else {
      out.spans.push_back({tensor->data(), tensor->numel()});
    }
    previous = tensor;
  }
  return out;
}

void ArenaRange::SetZero() const {
  if (!empty()) allocator->Fill(data, 0, size * sizeof(float));
}

std::vector<Tensor> ZerosInOneAllocation(
    Allocator* allocator, const std::vector<std::vector<int64_t>>& shapes,
    ArenaRange* range) {
  ArenaRange carved;
  std::vector<Tensor> tensors = Carve(allocator, shapes, &carved);
  carved.SetZero();
  if (range != nullptr) *range = carved;
  return tensors;
}

std::vector<IndexTensor> UploadIndices(
    Allocator* allocator, const std::vector<std::vector<int32_t>>& arrays) {
  return IndexUploader().Send(allocator, arrays);
}

std::vector<IndexTensor> IndexUploader::Send(
    Allocator* allocator, const std::vector<std::vector<int32_t>>& arrays) {
  std::vector<IndexTensor> tensors;
  if (allocator == nullptr) {
    for (const std::vector<int32_t>& array : arrays) {
      IndexTensor host({static_cast<int64_t>(array.size())}, 0, nullptr);
      host.values() = array;
      tensors.push_back(std::move(host));
    }
    return tensors;
  }
  // The arrays back to back in one staging buffer, sent whole: ops read
  // index arrays one int32 at a time, so no padding between them (and the
  // allocation is the arrays' bytes exactly, as the planner counts them).
  std::vector<size_t> sizes, offsets;
  size_t total = 0;
  for (const std::vector<int32_t>& array : arrays) {
    sizes.push_back(array.size());
    offsets.push_back(total);
    total += array.size();
  }
  std::vector<int32_t> staged(total, 0);
  for (size_t i = 0; i < arrays.size(); ++i) {
    std::copy(arrays[i].begin(), arrays[i].end(), staged.begin() + offsets[i]);
  }
  const size_t bytes = total * sizeof(int32_t);
  if (arena_ == nullptr || arena_->allocator() != allocator ||
      sizes != sizes_) {
    arena_ = std::make_shared<const DeviceBuffer>(allocator, bytes);
    sizes_ = sizes;
  }
  // In place when the sizes repeat: queued after the work that reads the
  // last arrays, on the allocator's stream.
  if (bytes > 0) allocator->CopyFromHost(arena_->data(), staged.data(), bytes);
  for (size_t i = 0; i < arrays.size(); ++i) {
    const int64_t size = static_cast<int64_t>(sizes[i]);
    tensors.push_back(
        size == 0
            ? IndexTensor({0}, 0, allocator)
            : IndexTensor({size}, DeviceBuffer::ViewOf(
                                      arena_, offsets[i] * sizeof(int32_t),
                                      size * sizeof(int32_t))));
  }
  return tensors;
}

}  // namespace glm
