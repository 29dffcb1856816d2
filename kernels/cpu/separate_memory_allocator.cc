#include "kernels/cpu/separate_memory_allocator.h"

#include <cstdlib>
#include <cstring>

namespace glm {

void* SeparateMemoryAllocator::Allocate(size_t bytes) {
  // 256-byte alignment, as device allocators give.
  void* data = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = bytes;
  }
  const int64_t now = in_use_ += static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return data;
}

void SeparateMemoryAllocator::Free(void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.find(data);
  in_use_ -= static_cast<int64_t>(it->second);
  sizes_.erase(it);
  std::free(data);
}

void SeparateMemoryAllocator::Fill(void* data, int byte, size_t bytes) {
  std::memset(data, byte, bytes);
}

void SeparateMemoryAllocator::CopyWithin(void* dst, const void* src,
                                         size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void SeparateMemoryAllocator::CopyFromHost(void* dst, const void* src,
                                           size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void SeparateMemoryAllocator::CopyToHost(void* dst, const void* src,
                                         size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace glm
