#include "kernels/device_memory.h"

#include <utility>

namespace glm {
namespace {

thread_local Allocator* current_allocator = nullptr;

}  // namespace

Allocator* CurrentAllocator() { return current_allocator; }

AllocatorScope::AllocatorScope(Allocator* allocator)
    : previous_(current_allocator) {
  current_allocator = allocator;
}

AllocatorScope::~AllocatorScope() { current_allocator = previous_; }

DeviceBuffer::DeviceBuffer(Allocator* allocator, size_t bytes)
    : allocator_(allocator), bytes_(bytes) {
  if (bytes_ > 0) data_ = allocator_->Allocate(bytes_);
}

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(const DeviceBuffer& other)
    : DeviceBuffer(other.allocator_, other.bytes_) {
  if (bytes_ > 0) allocator_->CopyWithin(data_, other.data_, bytes_);
}

DeviceBuffer& DeviceBuffer::operator=(const DeviceBuffer& other) {
  if (this != &other) *this = DeviceBuffer(other);
  return *this;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) allocator_->Free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace glm
