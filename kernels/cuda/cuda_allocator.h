// Device memory for tensors: a stream-ordered caching pool.
//
// Allocations come from the device's memory pool through cudaMallocAsync on
// the backend's stream, with the pool's release threshold at its maximum so
// freed blocks stay cached for the next step instead of going back to the
// driver; stream-ordered allocation is also what CUDA graph capture accepts.
#ifndef GLM_KERNELS_CUDA_CUDA_ALLOCATOR_H_
#define GLM_KERNELS_CUDA_CUDA_ALLOCATOR_H_

#include <cuda_runtime.h>

#include "kernels/allocation_ledger.h"
#include "kernels/device_memory.h"

namespace glm::cuda {

class CudaAllocator : public Allocator {
 public:
  // Allocates on `device` (already current), ordered on `stream`.
  CudaAllocator(int device, cudaStream_t stream);

  std::string Name() const override;
  void* Allocate(size_t bytes) override;
  void Free(void* data) override;
  void Fill(void* data, int byte, size_t bytes) override;
  void CopyWithin(void* dst, const void* src, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Wait() override;
  std::unique_ptr<DeviceMark> Mark() override;
  void* queue() override { return stream_; }
  bool Holds(const void* data) const override { return ledger_.Holds(data); }
  int64_t bytes_in_use() const override { return ledger_.in_use(); }
  int64_t peak_bytes() const override { return ledger_.peak(); }
  void ResetPeak() override { ledger_.ResetPeak(); }
  void RaisePeak(int64_t bytes) { ledger_.RaisePeak(bytes); }

 private:
  int device_;
  cudaStream_t stream_;
  AllocationLedger ledger_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CUDA_ALLOCATOR_H_
