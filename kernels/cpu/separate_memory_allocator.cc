#include "kernels/cpu/separate_memory_allocator.h"

#include <cstdlib>
#include <cstring>

namespace glm {

void* SeparateMemoryAllocator::Allocate(size_t bytes) {
  // 256-byte alignment, as device allocators give, and at least one byte, so
  // that every allocation has an address of its own.
  void* data = std::aligned_alloc(256, (bytes + 256) / 256 * 256);
  ledger_.Add(data, bytes);
  return data;
}

void SeparateMemoryAllocator::Free(void* data) {
  ledger_.Remove(data);
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
  ++uploads_;
  std::memcpy(dst, src, bytes);
}

void SeparateMemoryAllocator::CopyToHost(void* dst, const void* src,
                                         size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace glm
