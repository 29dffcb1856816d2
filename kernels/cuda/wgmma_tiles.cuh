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

#include "kernels/tensor.h"

namespace glm::cuda {

constexpr int kSwizzleBytes = 128;  // an atom's row
constexpr int kChunkBytes = 16;     // a cp.async copy
constexpr int kAtomChunks = kSwizzleBytes / kChunkBytes;

// Whether the rows of `view` are `type` and copyable in 16-byte chunks: the
// data 16-byte aligned and the rows a whole number of chunks apart.
inline bool ChunkAlignedRows(ConstMatrixView view, ElementType type) {
  return view.dtype == type &&
         reinterpret_cast<uintptr_t>(view.data) % kChunkBytes == 0 &&
         view.stride * ElementBytes(type) % kChunkBytes == 0;
}

// Byte offset of 16-byte chunk c of row r in a tile of `rows` rows.
__device__ __forceinline__ int SwizzledChunk(int rows, int r, int c) {
  return (c / kAtomChunks) * rows * kSwizzleBytes + r * kSwizzleBytes +
         (((c % kAtomChunks) ^ (r & 7)) * kChunkBytes);
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
