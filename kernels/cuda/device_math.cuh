// Device helpers shared by the CUDA ops: grid sizing, element and block
// loops, block sums and deterministic column sums. Every reduction here adds
// in an order fixed by the shape alone, so results are bitwise repeatable.
#ifndef GLM_KERNELS_CUDA_DEVICE_MATH_CUH_
#define GLM_KERNELS_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"

namespace glm::cuda {

// Threads per block of the element-wise and column kernels.
constexpr int kBlockThreads = 256;

// Blocks for a grid-stride loop over `count` items: enough to fill an H200
// several times over, capped so that large counts loop instead.
inline unsigned int GridStrideBlocks(int64_t count) {
  constexpr int64_t kMaxBlocks = 4096;
  return static_cast<unsigned int>(std::max<int64_t>(
      1, std::min((count + kBlockThreads - 1) / kBlockThreads, kMaxBlocks)));
}

// The keys a block of queries ending (exclusive) at `query_end` can select:
// in self-attention (nq == nk, a query's keys never after it) those before
// query_end, rounded up to 8 so that products over them keep rows 32-byte
// aligned (TF32) or 16-byte aligned (bf16); otherwise all nk.
inline int64_t VisibleKeyEnd(int64_t nq, int64_t nk, int64_t query_end) {
  return nq == nk ? std::min(nk, (query_end + 7) / 8 * 8) : nk;
}

// Threads for a kernel that gives each row one block: whole warps, no more
// than the row has columns (up to 256).
inline int RowBlockThreads(int64_t cols) {
  const int64_t warps = std::min<int64_t>((cols + 31) / 32, 8);
  return static_cast<int>(std::max<int64_t>(warps, 1) * 32);
}

// Element (r, c) of a view (MatrixView's methods are host-only).
template <typename View>
__device__ __forceinline__ auto& At(const View& view, int64_t r, int64_t c) {
  return view.data[r * view.stride + c];
}

// Element (r, c) of a BF16 view.
template <typename View>
__device__ __forceinline__ auto& Bf16At(const View& view, int64_t r,
                                        int64_t c) {
  using Element = std::conditional_t<
      std::is_const_v<std::remove_pointer_t<decltype(view.data)>>,
      const __nv_bfloat16, __nv_bfloat16>;
  return reinterpret_cast<Element*>(view.data)[r * view.stride + c];
}

// Element (r, c) of an F32 or BF16 view, as a float.
__device__ __forceinline__ float Load(const ConstMatrixView& view, int64_t r,
                                      int64_t c) {
  return view.dtype == ElementType::kBF16 ? __bfloat162float(Bf16At(view, r, c))
                                          : At(view, r, c);
}

// Writes `value` to element (r, c) of an F32 or BF16 view (rounded to
// nearest even).
__device__ __forceinline__ void Store(const MatrixView& view, int64_t r,
                                      int64_t c, float value) {
  if (view.dtype == ElementType::kBF16) {
    Bf16At(view, r, c) = __float2bfloat16_rn(value);
  } else {
    At(view, r, c) = value;
  }
}

// Calls body(r, c) for every element of a [rows, cols] space, spread over the
// whole grid (a 1-D launch). Spaces under 2^31 elements (all but the largest)
// index in 32 bits: a 64-bit division per element costs more issue slots
// than the element's memory traffic.
template <typename Body>
__device__ __forceinline__ void ForEachElement(int64_t rows, int64_t cols,
                                               const Body& body) {
  const int64_t count = rows * cols;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  if (count < (int64_t{1} << 31)) {
    // i + step stays below 2^32: no wrap.
    const uint32_t n = static_cast<uint32_t>(count),
                   width = static_cast<uint32_t>(cols);
    for (uint32_t i = static_cast<uint32_t>(first); i < n;
         i += static_cast<uint32_t>(step)) {
      const uint32_t r = i / width;
      body(int64_t{r}, int64_t{i - r * width});
    }
    return;
  }
  for (int64_t i = first; i < count; i += step) {
    const int64_t r = i / cols;
    body(r, i - r * cols);
  }
}

// x rounded to TF32 (to nearest, ties away from zero), as cuBLAS's TF32
// products read their fp32 operands.
__device__ __forceinline__ float RoundTf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
}

// Whether `p` is a multiple of `bytes` (a vector access's alignment).
__host__ __device__ __forceinline__ bool AlignedTo(const void* p,
                                                   uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Whether every view allows float4 accesses at columns that are multiples of
// four: 16-byte aligned rows (data and stride) of a multiple of four columns.
// Empty views pass.
template <typename... Views>
bool QuadAligned(const Views&... views) {
  auto fits = [](const auto& v) {
    return v.data == nullptr ||
           (v.cols % 4 == 0 && v.stride % 4 == 0 && AlignedTo(v.data, 16));
  };
  return (fits(views) && ...);
}

// out[0, 4) = bf16(a, b, c, d), rounded to nearest even, in one 8-byte store
// (out 8-byte aligned).
__device__ __forceinline__ void StoreBf16x4(float a, float b, float c, float d,
                                            __nv_bfloat16* out) {
  struct alignas(8) Bf16x4 {
    __nv_bfloat162 lo, hi;
  };
  *reinterpret_cast<Bf16x4*>(out) = {__floats2bfloat162_rn(a, b),
                                     __floats2bfloat162_rn(c, d)};
}

// The float4 at (r, c) of a QuadAligned view, c a multiple of four.
template <typename View>
__device__ __forceinline__ auto& QuadAt(const View& view, int64_t r,
                                        int64_t c) {
  using Quad = std::conditional_t<
      std::is_const_v<std::remove_pointer_t<decltype(view.data)>>, const float4,
      float4>;
  return *reinterpret_cast<Quad*>(view.data + r * view.stride + c);
}

// Columns [c, c + 4) of row r of a QuadAligned F32 or BF16 view (one 16- or
// 8-byte load).
__device__ __forceinline__ float4 LoadQuad(const ConstMatrixView& view,
                                           int64_t r, int64_t c) {
  if (view.dtype != ElementType::kBF16) return QuadAt(view, r, c);
  struct alignas(8) Bf16x4 {
    __nv_bfloat162 lo, hi;
  };
  const Bf16x4 v = *reinterpret_cast<const Bf16x4*>(&Bf16At(view, r, c));
  const float2 lo = __bfloat1622float2(v.lo), hi = __bfloat1622float2(v.hi);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Writes four values to columns [c, c + 4) of row r of a QuadAligned F32 or
// BF16 view (one 16- or 8-byte store).
__device__ __forceinline__ void StoreQuad(const MatrixView& view, int64_t r,
                                          int64_t c, float4 v) {
  if (view.dtype == ElementType::kBF16) {
    StoreBf16x4(v.x, v.y, v.z, v.w, &Bf16At(view, r, c));
  } else {
    QuadAt(view, r, c) = v;
  }
}

// ForEachElement over groups of four columns (cols a multiple of four):
// body(r, c) for c = 0, 4, 8, ...; a quarter of the index work, and 16-byte
// accesses through QuadAt.
template <typename Body>
__device__ __forceinline__ void ForEachQuad(int64_t rows, int64_t cols,
                                            const Body& body) {
  ForEachElement(rows, cols / 4, [&](int64_t r, int64_t q) { body(r, 4 * q); });
}

// ---- One row in shared memory ----
//
// Gathers and scatters at a query's key indices, which come in any order: a
// block moves the whole row between global memory (coalesced) and shared
// memory, where the random accesses stay on chip.

// to[0, cols) = from[0, cols) by the block, four floats per access where
// both are 16-byte aligned (the rows are short: fewer, wider loads keep more
// of them in flight).
__device__ __forceinline__ void CopyRow(const float* from, int64_t cols,
                                        float* to) {
  const bool wide =
      ((reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(to)) %
       16) == 0;
  const int64_t quads = wide ? cols / 4 : 0;
  for (int64_t i = threadIdx.x; i < quads; i += blockDim.x) {
    reinterpret_cast<float4*>(to)[i] = reinterpret_cast<const float4*>(from)[i];
  }
  for (int64_t i = 4 * quads + threadIdx.x; i < cols; i += blockDim.x) {
    to[i] = from[i];
  }
}

// shared[0, cols) = row[0, cols), then a barrier.
__device__ __forceinline__ void LoadRow(const float* row, int64_t cols,
                                        float* shared) {
  CopyRow(row, cols, shared);
  __syncthreads();
}

// A barrier, then row[0, cols) = shared[0, cols).
__device__ __forceinline__ void StoreRow(const float* shared, int64_t cols,
                                         float* row) {
  __syncthreads();
  CopyRow(shared, cols, row);
}

// Whether a row of `cols` floats fits a block's shared memory (Hopper: 227
// KiB).
inline bool RowFitsShared(int64_t cols) {
  return cols * sizeof(float) <= size_t{227} << 10;
}

// Lets `kernel` launch with `bytes` of dynamic shared memory, beyond the
// default 48 KiB.
template <typename Kernel>
void AllowShared(Kernel* kernel, size_t bytes) {
  GLM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)));
}

// Dynamic shared memory for a row of `cols` floats (RowFitsShared), allowed
// to `kernel`.
template <typename Kernel>
size_t RowSharedBytes(Kernel* kernel, int64_t cols) {
  assert(RowFitsShared(cols));
  const size_t bytes = cols * sizeof(float);
  AllowShared(kernel, bytes);
  return bytes;
}

template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffff, value, offset);
  }
  return value;
}

// Sum of `value` over the block (blockDim.x a multiple of 32); every thread
// gets the same total. Ends with a barrier, so calls may follow each other.
template <typename T>
__device__ T BlockSum(T value) {
  __shared__ T warp_sums[32];
  value = WarpSum(value);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    total += warp_sums[w];
  }
  __syncthreads();
  return total;
}

// ---- Column sums: out_k[c] += sum over rows r of term_k(r, c). ----
//
// For weight gradients of row-wise ops. Pass one splits the rows into fixed
// chunks and writes each chunk's double sums to scratch; pass two adds each
// column's chunks in a fixed order and accumulates the rounded total into each
// output. A Term is a functor with
//   __device__ void operator()(int64_t r, int64_t c, double (&acc)[K]) const
// that adds row r's contributions to column c into acc.

template <int K>
struct ColumnOutputs {
  float* out[K];  // null: that sum is not wanted
};

struct RowChunks {
  int64_t rows_per_chunk;
  int64_t count;
};

inline RowChunks SplitRows(int64_t rows) {
  constexpr int64_t kMaxChunks = 128;
  constexpr int64_t kMinRowsPerChunk = 32;
  const int64_t per_chunk =
      std::max(kMinRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks);
  return {per_chunk, (rows + per_chunk - 1) / per_chunk};
}

// Scratch bytes ColumnSums needs.
template <int K>
size_t ColumnSumsBytes(int64_t rows, int64_t cols) {
  return sizeof(double) * K * SplitRows(rows).count * cols;
}

template <int K, typename Term>
__global__ void ColumnPartialSumsKernel(Term term, int64_t rows, int64_t cols,
                                        RowChunks chunks,
                                        double* __restrict__ partial) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t begin = blockIdx.y * chunks.rows_per_chunk;
  const int64_t end = std::min(rows, begin + chunks.rows_per_chunk);
  double acc[K] = {};
  for (int64_t r = begin; r < end; ++r) term(r, c, acc);
  for (int k = 0; k < K; ++k) {
    partial[(k * chunks.count + blockIdx.y) * cols + c] = acc[k];
  }
}

// Columns kSumColumns a block, their chunks split over kSumLanes lanes of
// threads: lane l sums chunks l, l + kSumLanes, ... in order, then the
// lanes' sums are added in lane order (a fixed order: deterministic).
constexpr int kSumColumns = 32;
constexpr int kSumLanes = kBlockThreads / kSumColumns;

template <int K>
__global__ void AddColumnSumsKernel(const double* __restrict__ partial,
                                    int64_t chunks, int64_t cols,
                                    ColumnOutputs<K> outputs) {
  __shared__ double lane_sums[kSumLanes][kSumColumns];
  const int lane = threadIdx.x / kSumColumns, col = threadIdx.x % kSumColumns;
  const int64_t c = int64_t{blockIdx.x} * kSumColumns + col;
  for (int k = 0; k < K; ++k) {
    if (outputs.out[k] == nullptr) continue;  // the same for every thread
    double sum = 0;
    if (c < cols) {
      for (int64_t j = lane; j < chunks; j += kSumLanes) {
        sum += partial[(k * chunks + j) * cols + c];
      }
    }
    lane_sums[lane][col] = sum;
    __syncthreads();
    if (lane == 0 && c < cols) {
      double total = 0;
      for (int l = 0; l < kSumLanes; ++l) total += lane_sums[l][col];
      outputs.out[k][c] += static_cast<float>(total);
    }
    __syncthreads();
  }
}

// out_k[c] += sum over j < chunks of partial[(k * chunks + j) * cols + c]
// (device memory), for the outputs given.
template <int K>
void AddColumnSums(const double* partial, int64_t chunks, int64_t cols,
                   ColumnOutputs<K> outputs, cudaStream_t stream) {
  const unsigned int blocks =
      static_cast<unsigned int>((cols + kSumColumns - 1) / kSumColumns);
  AddColumnSumsKernel<K>
      <<<blocks, kBlockThreads, 0, stream>>>(partial, chunks, cols, outputs);
  GLM_CUDA_CHECK_LAUNCH();
}

// `scratch`: ColumnSumsBytes<K>(rows, cols) bytes of device memory.
template <int K, typename Term>
void ColumnSums(const Term& term, int64_t rows, int64_t cols,
                ColumnOutputs<K> outputs, void* scratch, cudaStream_t stream) {
  assert(rows > 0 && cols > 0);
  const RowChunks chunks = SplitRows(rows);
  assert(chunks.count <= 65535);
  double* partial = static_cast<double*>(scratch);
  const unsigned int col_blocks =
      static_cast<unsigned int>((cols + kBlockThreads - 1) / kBlockThreads);
  const dim3 grid(col_blocks, static_cast<unsigned int>(chunks.count));
  ColumnPartialSumsKernel<K>
      <<<grid, kBlockThreads, 0, stream>>>(term, rows, cols, chunks, partial);
  GLM_CUDA_CHECK_LAUNCH();
  AddColumnSums<K>(partial, chunks.count, cols, outputs, stream);
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_DEVICE_MATH_CUH_
