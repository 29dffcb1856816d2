// cp.async: 16-byte copies from global to shared memory that the copying
// threads wait for by group. Shared by the kernels that stage operand tiles
// (wgmma_tiles.cuh's, the latent attention's head rows).
#ifndef GLM_KERNELS_CUDA_ASYNC_COPY_CUH_
#define GLM_KERNELS_CUDA_ASYNC_COPY_CUH_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cuda {

constexpr int kChunkBytes = 16;  // a cp.async copy

// Whether the rows of `view` are `type` and copyable in 16-byte chunks: the
// data 16-byte aligned and the rows a whole number of chunks apart.
inline bool ChunkAlignedRows(ConstMatrixView view, ElementType type) {
  return view.dtype == type &&
         reinterpret_cast<uintptr_t>(view.data) % kChunkBytes == 0 &&
         view.stride * ElementBytes(type) % kChunkBytes == 0;
}

// cp.async of 16 bytes, zero-filled (src not read) when !valid.
__device__ __forceinline__ void CopyChunk(void* dst, const void* src,
                                          bool valid) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void CommitCopies() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits for this thread's copies but the kPending latest groups.
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ASYNC_COPY_CUH_
