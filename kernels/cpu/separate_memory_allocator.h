// An Allocator in host memory that tensors treat as a device's: tensors made
// on it are not "on the host", so every transfer takes the explicit copy paths
// a GPU run takes (uploads of index arrays, device mirrors of the weights,
// staging through host memory for collectives and checkpoints). With a
// CpuBackend over it, CPU tests exercise the device memory model, and the
// backend checks that every operand lies in it (Holds). It also measures
// exactly what is allocated on it (bytes in use, peak).
#ifndef GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_
#define GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_

#include <atomic>
#include <cstdint>

#include "kernels/allocation_ledger.h"
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
  bool Holds(const void* data) const override { return ledger_.Holds(data); }
  int64_t bytes_in_use() const override { return ledger_.in_use(); }
  // Live allocations (an arena is one).
  int64_t allocations() const { return ledger_.count(); }
  int64_t peak_bytes() const override { return ledger_.peak(); }
  void ResetPeak() override { ledger_.ResetPeak(); }
  // Host-to-device copies so far.
  int64_t uploads() const { return uploads_.load(); }

 private:
  AllocationLedger ledger_;
  std::atomic<int64_t> uploads_{0};
};

}  // namespace glm

#endif  // GLM_KERNELS_CPU_SEPARATE_MEMORY_ALLOCATOR_H_
