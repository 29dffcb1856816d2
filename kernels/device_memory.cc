#include "kernels/device_memory.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <string>
#include <utility>

namespace glm {
namespace {

thread_local Allocator* current_allocator = nullptr;

}  // namespace

Allocator* CurrentAllocator() { return current_allocator; }

void CopyFloats(Allocator* memory, float* dst, const float* src,
                int64_t count) {
  if (count <= 0) return;
  if (memory == nullptr) {
    std::copy_n(src, count, dst);
  } else {
    memory->CopyWithin(dst, src, static_cast<size_t>(count) * sizeof(float));
  }
}

bool PoisonOutputs() {
  static const bool poison = [] {
    const char* value = std::getenv("GLM_POISON_OUTPUTS");
    return value != nullptr && std::string(value) == "1";
  }();
  return poison;
}

AllocatorScope::AllocatorScope(Allocator* allocator)
    : previous_(current_allocator) {
  current_allocator = allocator;
}

AllocatorScope::~AllocatorScope() { current_allocator = previous_; }

DeviceBuffer::DeviceBuffer(Allocator* allocator, size_t bytes)
    : allocator_(allocator), bytes_(bytes) {
  if (bytes_ > 0) data_ = allocator_->Allocate(bytes_);
}

DeviceBuffer DeviceBuffer::ViewOf(std::shared_ptr<const DeviceBuffer> shared,
                                  size_t offset, size_t bytes) {
  assert(offset + bytes <= shared->bytes_);
  DeviceBuffer view;
  view.allocator_ = shared->allocator_;
  view.data_ = static_cast<char*>(shared->data_) + offset;
  view.bytes_ = bytes;
  view.shared_ = std::move(shared);
  return view;
}

DeviceBuffer DeviceBuffer::Alias() const {
  if (shared_ == nullptr) return *this;
  return ViewOf(shared_,
                static_cast<const char*>(data_) -
                    static_cast<const char*>(shared_->data_),
                bytes_);
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
      bytes_(std::exchange(other.bytes_, 0)),
      shared_(std::move(other.shared_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    shared_ = std::move(other.shared_);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr && shared_ == nullptr) allocator_->Free(data_);
  shared_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace glm
