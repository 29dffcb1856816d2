// An Allocator in host memory that tensors treat as a device's: tensors made
// on it are not "on the host", so every transfer takes the explicit copy paths
// a GPU run takes (uploads of index arrays, device mirrors of the weights,
// staging through host memory for collectives and checkpoints). With a
// CpuBackend over it, CPU tests exercise the device memory model.
#ifndef GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_
#define GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_

#include <atomic>
#include <mutex>
#include <map>

#include "kernels/device_memory.h"

namespace glm {

class SeparateMemoryAllocator : public Allocator {
 public:
  std::string Name() const override { return "separate host memory"; }
  void* Allocate(size_t bytes) override;
  void Free(void* data) override;
  void Fill(void* data, int byte, size_t bytes) override;
  void CopyWithin(void* dst, const void* src, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  bool Holds(const void* data) const override;
  int64_t bytes_in_use() const override { return in_use_; }
  int64_t peak_bytes() const override { return peak_; }
  void ResetPeak() override { peak_ = in_use_.load(); }

 private:
  mutable std::mutex mutex_;
  // Live allocations by start address (ordered, so Holds finds the one
  // below a pointer).
  std::map<const char*, size_t> sizes_;
  std::atomic<int64_t> in_use_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace glm

#endif  // GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_
