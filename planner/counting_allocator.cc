#include "planner/counting_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace glm {

void* CountingAllocator::Allocate(size_t bytes) {
  void* data = std::malloc(bytes);
  sizes_[data] = bytes;
  in_use_ += static_cast<int64_t>(bytes);
  peak_ = std::max(peak_, in_use_);
  return data;
}

void CountingAllocator::Free(void* data) {
  const auto found = sizes_.find(data);
  in_use_ -= static_cast<int64_t>(found->second);
  sizes_.erase(found);
  std::free(data);
}

void CountingAllocator::Fill(void* data, int byte, size_t bytes) {
  std::memset(data, byte, bytes);
}

void CountingAllocator::CopyWithin(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CountingAllocator::CopyFromHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CountingAllocator::CopyToHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace glm
