// Operand tiles for Hopper's wgmma read from shared memory: K-major rows
// with 128-byte swizzling, filled by cp.async. A tile of `rows` rows keeps
// bytes [128 a, 128 a + 128) of row r as atom a's row r; its 16-byte chunk c
// lies at chunk c ^ (r % 8) of that row. Each atom block (rows x 128 bytes)
// starts 1024-byte aligned, as the swizzle requires. Shared by the kernels
// that multiply such tiles (the indexer's scores, the attention's key sums).
#ifndef GLM_KERNELS_CUDA_WGMMA_TILES_CUH_
#define GLM_KERNELS_CUDA_WGMMA_TILES_CUH_

#include <cstdint>
#include <cute/arch/mma_sm90_desc.hpp>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/tensor.h"

namespace glm::cuda {

constexpr int kSwizzleBytes = 128;  // an atom's row
constexpr int kAtomChunks = kSwizzleBytes / kChunkBytes;

// Byte offset of 16-byte chunk c of row r in a tile of `rows` rows.
__device__ __forceinline__ int SwizzledChunk(int rows, int r, int c) {
  return (c / kAtomChunks) * rows * kSwizzleBytes + r * kSwizzleBytes +
         (((c % kAtomChunks) ^ (r & 7)) * kChunkBytes);
}

// Makes this thread's shared-memory writes (its landed copies included)
// visible to the tensor cores' reads (the async proxy); a barrier after it
// publishes them to the warpgroups that multiply.
__device__ __forceinline__ void FenceForTensorCores() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A wgmma descriptor of a K-major, 128-byte swizzled operand starting at
// `start` (8-row groups 1024 bytes apart).
__device__ __forceinline__ uint64_t SwizzledDescriptor(const void* start) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ =
      static_cast<uint16_t>(__cvta_generic_to_shared(start) >> 4);
  d.bitfield.leading_byte_offset_ = 1;  // unused with swizzling
  d.bitfield.stride_byte_offset_ = 1024 >> 4;
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ =
      static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::B128);
  return d.desc_;
}

// Dynamic shared memory rounded up to the swizzle's 1024-byte alignment.
template <typename T>
__device__ __forceinline__ T& AlignedShared(char* bytes) {
  return *reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(bytes) + 1023) /
                               1024 * 1024);
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_WGMMA_TILES_CUH_
