// Where tensors live when they do not live in host memory.
//
// A device backend owns an Allocator (kernels/cuda/cuda_allocator.h: a
// stream-ordered caching pool). Tensors constructed while an AllocatorScope is
// active on the thread take their storage from that allocator (a model pass on
// a device backend allocates its activations there); otherwise they live in
// host memory. Moving data between the two is always an explicit copy.
#ifndef GLM_KERNELS_DEVICE_MEMORY_H_
#define GLM_KERNELS_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace glm {

// A point in a device's queued work (Allocator::Mark).
class DeviceMark {
 public:
  virtual ~DeviceMark() = default;
  // Returns once the device has done everything queued before the mark.
  virtual void Wait() = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string Name() const = 0;
  // Never fails: an allocation the device cannot hold aborts with a message
  // naming the size and the bytes in use (training cannot continue anyway).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* data) = 0;
  // Sets every byte to `byte`; like the copies, ordered after every op
  // already issued on the device's stream.
  virtual void Fill(void* data, int byte, size_t bytes) = 0;
  virtual void CopyWithin(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the device: the host may read `dst` when it returns.
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every fill, copy and op already issued on the device's
  // stream has finished, so that work on another stream (a collective's)
  // reads what they wrote.
  virtual void Wait() {}
  // A mark after every fill, copy and op already issued on the device's
  // stream, for another thread to wait on before its stream reads what they
  // wrote (Wait would stall this thread, and the device with it, until the
  // queue drains). Null where queued work is already done (host stand-ins).
  virtual std::unique_ptr<DeviceMark> Mark() { return nullptr; }
  // The device's queue of work as its runtime names it (a cudaStream_t on
  // CUDA), for a group that orders its exchanges against this device's work
  // on the device (Collectives::QueueAllToAllV); null where work is done as it
  // is issued (host stand-ins).
  virtual void* queue() { return nullptr; }
  // Whether `data` points into a live allocation of this allocator, for checks
  // that an op reads only its backend's memory; true where it cannot tell.
  virtual bool Holds(const void* data) const { return true; }
  // Bytes held by live allocations now, and the most ever held at once.
  virtual int64_t bytes_in_use() const = 0;
  virtual int64_t peak_bytes() const = 0;
  virtual void ResetPeak() = 0;
};

// The allocator tensors constructed on this thread use; null: host memory.
Allocator* CurrentAllocator();

// `count` floats from `src` to `dst`, both in `memory` (null: the host's);
// on a device, queued like its other copies.
void CopyFloats(Allocator* memory, float* dst, const float* src, int64_t count);

// Whether device tensors made for an op's output start poisoned (0xff bytes)
// instead of as whatever their memory held: GLM_POISON_OUTPUTS=1, read once.
// Host tensors always start poisoned (kernels/tensor.h, Tensor::ForOutput).
bool PoisonOutputs();

// Makes `allocator` current on this thread for the scope's lifetime (scopes
// nest; null selects host memory).
class AllocatorScope {
 public:
  explicit AllocatorScope(Allocator* allocator);
  ~AllocatorScope();
  AllocatorScope(const AllocatorScope&) = delete;
  AllocatorScope& operator=(const AllocatorScope&) = delete;

 private:
  Allocator* previous_;
};

// An owning, untyped allocation from an Allocator, or a range of a shared one
// (a view: it keeps the shared allocation alive and frees nothing itself).
// Copies are owning allocations with the same contents either way.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Allocator* allocator, size_t bytes);
  // `bytes` bytes at `offset` into `*shared`.
  static DeviceBuffer ViewOf(std::shared_ptr<const DeviceBuffer> shared,
                             size_t offset, size_t bytes);
  // For a view: another view of the same bytes, no copy. Otherwise a copy
  // (as the copy constructor makes).
  DeviceBuffer Alias() const;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer& other);
  DeviceBuffer& operator=(const DeviceBuffer& other);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Allocator* allocator() const { return allocator_; }
  // For a view: the start of the shared allocation it lies in (the same for
  // every view of that allocation); null for an allocation of its own.
  const void* shared_data() const {
    return shared_ == nullptr ? nullptr : shared_->data();
  }

 private:
  void Release();

  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::shared_ptr<const DeviceBuffer> shared_;  // set for a view
};

}  // namespace glm

#endif  // GLM_KERNELS_DEVICE_MEMORY_H_
