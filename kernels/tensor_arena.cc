#include "kernels/tensor_arena.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "kernels/cpu/parallel.h"

namespace glm {
namespace {

// Where tensors start in an arena: aligned for vectorized loads and TMA.
constexpr int64_t kAlignBytes = 256;
constexpr int64_t kFloatBytes = sizeof(float);

// Zeroes `size` floats of host memory on every core: for a new allocation
// this is where the kernel first touches (and zeroes) its pages, seconds per
// core for billions of elements.
void ZeroHost(float* data, int64_t size) {
  cpu::ParallelFor(size, size, [data](int64_t begin, int64_t end) {
    std::memset(data + begin, 0, (end - begin) * sizeof(float));
  });
}

// A new host allocation of `bytes`, zeros, aligned as arena tensors start.
std::shared_ptr<void> HostZeros(int64_t bytes) {
  constexpr std::align_val_t kAlign{kAlignBytes};
  std::shared_ptr<void> arena(::operator new(bytes, kAlign),
                              [](void* p) { ::operator delete(p, kAlign); });
  ZeroHost(static_cast<float*>(arena.get()), bytes / kFloatBytes);
  return arena;
}

}  // namespace

int64_t ArenaBytes(int64_t elements) {
  const int64_t bytes = elements * kFloatBytes;
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
        previous == nullptr
            ? nullptr
            : previous->data() + ArenaBytes(previous->numel()) / kFloatBytes;
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
  if (empty()) return;
  if (allocator == nullptr) {
    ZeroHost(data, size);
  } else {
    allocator->Fill(data, 0, size * sizeof(float));
  }
}

std::vector<Tensor> ZerosInOneAllocation(
    Allocator* allocator, const std::vector<std::vector<int64_t>>& shapes,
    ArenaRange* range) {
  std::vector<int64_t> offsets;  // bytes from the arena's start
  int64_t total = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    offsets.push_back(total);
    total += ArenaBytes(NumElements(shape));
  }
  ArenaRange carved;
  std::shared_ptr<void> host;
  std::shared_ptr<const DeviceBuffer> device;
  if (total > 0 && allocator == nullptr) {
    host = HostZeros(total);
    carved = {nullptr, static_cast<float*>(host.get()), total / kFloatBytes};
  } else if (total > 0) {
    device = std::make_shared<const DeviceBuffer>(allocator, total);
    carved = {allocator, static_cast<float*>(device->data()),
              total / kFloatBytes};
    carved.SetZero();
  }
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t elements = NumElements(shapes[i]);
    if (elements == 0) {
      tensors.emplace_back(shapes[i], allocator);
    } else if (host != nullptr) {
      tensors.emplace_back(shapes[i], host,
                           carved.data + offsets[i] / kFloatBytes);
    } else {
      tensors.emplace_back(
          shapes[i],
          DeviceBuffer::ViewOf(device, offsets[i], elements * kFloatBytes));
    }
  }
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
