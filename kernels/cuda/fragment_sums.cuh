// Adding an mma.sync accumulator fragment into rows of an fp32 buffer with
// atomics, for the kernels whose blocks each add a part of many rows (the
// latent attention's key gradient, the sparse indexer loss's).
#ifndef GLM_KERNELS_CUDA_FRAGMENT_SUMS_CUH_
#define GLM_KERNELS_CUDA_FRAGMENT_SUMS_CUH_

#include <cstdint>

namespace glm::cuda {

// sums[row][col0, col0 + 8) += an m16n8 fp32 fragment (acc: lane's rows g and
// g + 8 = lane / 4 + {0, 8}, columns 2 (lane % 4) + {0, 1}), its row g going
// to row_lo and g + 8 to row_hi (-1: dropped). Four adjacent columns an
// atomic: each pair of lanes swaps the halves of their rows g and g + 8, so
// the even lane adds row g's four and the odd one row g + 8's (half the
// atomics of adding pairs). sums: 16-byte aligned rows, ld floats apart.
__device__ __forceinline__ void AddFragmentQuads(float* sums, int64_t ld,
                                                 int32_t row_lo, int32_t row_hi,
                                                 int col0,
                                                 const float (&acc)[4]) {
  const int lane = threadIdx.x % 32;
  const bool even = lane % 2 == 0;
  const int32_t row = even ? row_lo : row_hi;
  const float send0 = even ? acc[2] : acc[0], send1 = even ? acc[3] : acc[1];
  const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1),
              got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
  const float4 sum = even ? make_float4(acc[0], acc[1], got0, got1)
                          : make_float4(got0, got1, acc[2], acc[3]);
  const int col = col0 + 4 * (lane % 4 / 2);
  if (row >= 0)
    atomicAdd(reinterpret_cast<float4*>(sums + row * ld + col), sum);
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_FRAGMENT_SUMS_CUH_
