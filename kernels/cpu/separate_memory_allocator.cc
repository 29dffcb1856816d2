#include "kernels/cpu/separate_memory_allocator.h"

#include <cstdlib>
#include <algorithm>
#include <cstring>

namespace glm {

void* SeparateMemoryAllocator::Allocate(size_t bytes) {
  // 256-byte alignment, as device allocators give.
  // At least one byte, so that every allocation has an address of its own.
  void* data = std::aligned_alloc(256, (bytes + 256) / 256 * 256);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[static_cast<const char*>(data)] = bytes;
  }
  const int64_t now = in_use_ += static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return data;
}

void SeparateMemoryAllocator::Free(void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.find(static_cast<const char*>(data));
  in_use_ -= static_cast<int64_t>(it->second);
  sizes_.erase(it);
  std::free(data);
}

bool SeparateMemoryAllocator::Holds(const void* data) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.upper_bound(p);
  if (it == sizes_.begin()) return false;
  --it;
  return p < it->first + std::max<size_t>(it->second, 1);
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
