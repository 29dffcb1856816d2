#include "kernels/cuda/cuda_allocator.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace glm::cuda {

CudaAllocator::CudaAllocator(int device, cudaStream_t stream)
    : device_(device), stream_(stream) {
  cudaMemPool_t pool;
  GLM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep_everything = UINT64_MAX;
  GLM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                         &keep_everything));
}

std::string CudaAllocator::Name() const {
  return "cuda:" + std::to_string(device_);
}

void* CudaAllocator::Allocate(size_t bytes) {
  void* data = nullptr;
  const cudaError_t status = cudaMallocAsync(&data, bytes, stream_);
  if (status != cudaSuccess) {
    std::fprintf(
        stderr, "%s: cannot allocate %zu bytes with %lld in use (%s)\n",
        Name().c_str(), bytes, static_cast<long long>(ledger_.in_use()),
        cudaGetErrorString(status));
    std::abort();
  }
  ledger_.Add(data, bytes);
  return data;
}

void CudaAllocator::Free(void* data) {
  ledger_.Remove(data);
  GLM_CUDA_CHECK(cudaFreeAsync(data, stream_));
}

void CudaAllocator::Fill(void* data, int byte, size_t bytes) {
  GLM_CUDA_CHECK(cudaMemsetAsync(data, byte, bytes, stream_));
}

void CudaAllocator::CopyWithin(void* dst, const void* src, size_t bytes) {
  GLM_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaAllocator::CopyFromHost(void* dst, const void* src, size_t bytes) {
  // From pageable memory the call returns once `src` has been staged, so the
  // caller may free it at once.
  GLM_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaAllocator::CopyToHost(void* dst, const void* src, size_t bytes) {
  GLM_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  GLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaAllocator::Wait() { GLM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

namespace {

// An event recorded on the allocator's stream.
class EventMark : public DeviceMark {
 public:
  explicit EventMark(cudaStream_t stream) {
    GLM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    GLM_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~EventMark() override { cudaEventDestroy(event_); }
  EventMark(const EventMark&) = delete;
  EventMark& operator=(const EventMark&) = delete;

  void Wait() override { GLM_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceMark> CudaAllocator::Mark() {
  return std::make_unique<EventMark>(stream_);
}

}  // namespace glm::cuda
