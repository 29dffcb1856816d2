#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/indexer_scores.cuh"

namespace glm::cuda {
namespace {

// A block scores kQueries queries (kMaxHeads head rows each, zeros past the
// last head) against up to kTilesPerBlock tiles of kKeys keys: the query rows
// are loaded once, each key tile's copy is in flight while the tile before it
// is multiplied (two buffers). Two warpgroups: warpgroup g multiplies rows
// [64 g, 64 g + 64) (queries 2g and 2g + 1) by the key tile with Hopper's
// wgmma (m64n64k8, TF32, both operands read from shared memory); in its
// accumulators warp w of the group holds heads 16 (w % 2) + [0, 16) of query
// 2g + w / 2, so a score sums a warp's heads by shuffles and the two warps'
// halves through shared memory. Rows are kMaxDim floats, zeros past dim.
constexpr int kMaxHeads = 32;
constexpr int kQueries = 4;
constexpr int kRows = kQueries * kMaxHeads;
constexpr int kKeys = 64;
constexpr int kMaxDim = 128;
constexpr int kChunks = kMaxDim / 4;  // 16-byte chunks a row
constexpr int kAtomFloats = 32;       // a 128-byte swizzle atom's row
constexpr int kAtoms = kMaxDim / kAtomFloats;
constexpr int kSteps = kMaxDim / 8;  // k8 steps of a product
constexpr int kTilesPerBlock = 16;
constexpr int kThreads = 256;
constexpr int kGroupRows = 64;  // rows a warpgroup multiplies
static_assert(kThreads / 128 * kGroupRows == kRows, "a warpgroup per 64 rows");

// Operand tiles in wgmma's K-major layout with 128-byte swizzling: dims
// [32 a, 32 a + 32) of row r are atom a's row r (128 bytes), whose 16-byte
// chunk c lies at chunk c ^ (r % 8). Each atom block starts 1024-byte
// aligned, as the swizzle requires.
struct SharedTiles {
  float a[kAtoms][kRows * kAtomFloats];
  float b[2][kAtoms][kKeys * kAtomFloats];
  float half_scores[kQueries][kKeys];  // the odd warps' halves of a score
  uint32_t half_bits[kQueries][kKeys];
};
constexpr size_t kSharedBytes = sizeof(SharedTiles) + 1024;  // + alignment

// Float offset of 16-byte chunk c (of kChunks) of row r in a tile of `rows`.
__device__ __forceinline__ int Swizzled(int rows, int r, int c) {
  return (c / 8) * rows * kAtomFloats + r * kAtomFloats +
         (((c % 8) ^ (r & 7)) << 2);
}

// cp.async of 16 bytes, zero-filled (src not read) when !valid.
__device__ __forceinline__ void CopyChunk(float* dst, const float* src,
                                          bool valid) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(src), "r"(valid ? 16 : 0));
}

// Waits for this thread's copies but the kPending latest groups.
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// x rounded to TF32 (to nearest, ties away from zero), as cuBLAS's TF32
// products read their fp32 operands.
__device__ __forceinline__ float RoundTf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
}

// Starts copying `rows` rows of dim floats (row r from row_of(r); null:
// zeros), zeros past dim, into a swizzled tile; any_row: a readable address
// for the zero fills to name.
template <typename RowFn>
__device__ void StartTile(float* tile, int rows, int dim, const float* any_row,
                          RowFn row_of) {
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const float* row = row_of(r);
    const bool valid = row != nullptr && 4 * c < dim;
    CopyChunk(tile + Swizzled(rows, r, c), valid ? row + 4 * c : any_row,
              valid);
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// Rounds to TF32 the chunks of a tile this thread copied (StartTile's
// mapping) once they have landed, and makes its writes visible to the
// tensor cores' reads (the async proxy).
__device__ void RoundTile(float* tile, int rows) {
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    auto* chunk = reinterpret_cast<float4*>(
        tile + Swizzled(rows, i / kChunks, i % kChunks));
    float4 v = *chunk;
    v.x = RoundTf32(v.x);
    v.y = RoundTf32(v.y);
    v.z = RoundTf32(v.z);
    v.w = RoundTf32(v.w);
    *chunk = v;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A wgmma descriptor of a K-major, 128-byte swizzled operand starting at
// `start` (8-row groups 1024 bytes apart).
__device__ __forceinline__ uint64_t Descriptor(const float* start) {
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

// The warpgroup's dots: d[4 j + 2 half + col] is its row 16 w + g + 8 half
// against key 8 j + 2 t + col (w: the warp in the group, g = lane / 4, t =
// lane % 4). a: the group's 64 rows of each atom block; b: a key tile.
using GroupAcc = float[32];

__device__ void GroupDots(const SharedTiles& sh, int group, int buffer,
                          GroupAcc& d) {
  using Mma = cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_SS_TN<>;
  for (float& x : d) x = 0.f;
  for (float& x : d) cute::warpgroup_fence_operand(x);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    // k8 step k: atom k / 4, 32 bytes per step inside it.
    const int atom = k / 4, offset = (k % 4) * 8;
    const uint64_t a =
        Descriptor(sh.a[atom] + group * kGroupRows * kAtomFloats + offset);
    const uint64_t b = Descriptor(sh.b[buffer][atom] + offset);
    Mma::fma(a, b, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9],
             d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17], d[18],
             d[19], d[20], d[21], d[22], d[23], d[24], d[25], d[26], d[27],
             d[28], d[29], d[30], d[31],
             k == 0 ? cute::SM90::GMMA::ScaleOut::Zero
                    : cute::SM90::GMMA::ScaleOut::One);
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  for (float& x : d) cute::warpgroup_fence_operand(x);
}

// A warp's 16 heads summed for each of the tile's keys: lanes 0-3 end with
// key 8 j + 2 t + col's sum in score[j][col] and its positive heads' bits
// (first_head: the warp's first head) in bits[j][col].
struct HalfScores {
  float score[8][2];
  uint32_t bits[8][2];
};

__device__ void SumWarpHeads(const GroupAcc& d, const float* weights, int heads,
                             int first_head, float scale, HalfScores& out) {
  const int g = (threadIdx.x % 32) / 4;
  float weight[2];
  for (int half = 0; half < 2; ++half) {
    const int h = first_head + g + 8 * half;
    weight[half] = h < heads ? weights[h] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      float score = 0.f;
      uint32_t bits = 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float x = scale * d[4 * j + 2 * half + col];
        score += weight[half] * fmaxf(x, 0.f);
        bits |= static_cast<uint32_t>(x > 0.f) << (first_head + g + 8 * half);
      }
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) {
        score += __shfl_xor_sync(0xffffffffu, score, offset);
        bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
      }
      out.score[j][col] = score;
      out.bits[j][col] = bits;
    }
  }
}

// Block (x, y): queries t0 + [q0, q0 + kQueries) with q0 counted from the
// last block down (the latest queries see the most keys: they start
// first), keys of tiles [y * kTilesPerBlock, +kTilesPerBlock).
__global__ void __launch_bounds__(kThreads, 1)
    IndexerScoresKernel(ConstMatrixView iq, ConstMatrixView ik,
                        ConstMatrixView w, int64_t t0, int64_t count,
                        int64_t key_end, int64_t causal_offset, float scale,
                        float* scores, uint32_t* positive, int64_t ld) {
  extern __shared__ __align__(16) char shared_bytes[];
  SharedTiles& sh = *reinterpret_cast<SharedTiles*>(
      (reinterpret_cast<uintptr_t>(shared_bytes) + 1023) / 1024 * 1024);
  const int64_t q0 = int64_t{gridDim.x - 1 - blockIdx.x} * kQueries;
  const int queries = static_cast<int>(std::min<int64_t>(kQueries, count - q0));
  // Keys the block's queries see (query: counted from q0), each and all.
  auto visible_end = [&](int query) {
    return causal_offset < 0
               ? key_end
               : std::min(key_end, causal_offset + t0 + q0 + query + 1);
  };
  const int64_t block_end = visible_end(queries - 1);
  const int64_t first_key = int64_t{blockIdx.y} * kTilesPerBlock * kKeys;
  if (first_key >= block_end) return;
  const int64_t last_key =
      std::min(block_end, first_key + kTilesPerBlock * kKeys);
  const int tiles =
      static_cast<int>((last_key - first_key + kKeys - 1) / kKeys);
  const int heads = static_cast<int>(w.cols), dim = static_cast<int>(iq.cols);
  StartTile(&sh.a[0][0], kRows, dim, iq.data, [&](int r) -> const float* {
    const int q = r / kMaxHeads, h = r % kMaxHeads;
    return q < queries && h < heads ? &At(iq, (t0 + q0 + q) * heads + h, 0)
                                    : nullptr;
  });
  auto start_keys = [&](int tile) {
    const int64_t s0 = first_key + int64_t{tile} * kKeys;
    StartTile(&sh.b[tile % 2][0][0], kKeys, dim, ik.data,
              [&](int r) -> const float* {
                return s0 + r < block_end ? &At(ik, s0 + r, 0) : nullptr;
              });
  };
  start_keys(0);
  const int group = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int query = 2 * group + warp / 2, lane = threadIdx.x % 32;
  // Uniform over the warpgroup (wgmma needs all of it): its first query
  // exists and sees the tile (the second sees no fewer keys).
  const int64_t group_end = visible_end(std::min(2 * group + 1, queries - 1));
  const int64_t query_end = visible_end(query);
  const float* weights = query < queries ? &At(w, t0 + q0 + query, 0) : w.data;
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      start_keys(tile + 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    if (tile == 0) RoundTile(&sh.a[0][0], kRows);
    RoundTile(&sh.b[tile % 2][0][0], kKeys);
    __syncthreads();
    const int64_t s0 = first_key + int64_t{tile} * kKeys;
    const bool active = 2 * group < queries && s0 < group_end;
    HalfScores half;
    if (active) {
      GroupAcc d;
      GroupDots(sh, group, tile % 2, d);
      SumWarpHeads(d, weights, heads, 16 * (warp % 2), scale, half);
      if (warp % 2 == 1 && lane < 4) {
        for (int j = 0; j < 8; ++j) {
          for (int col = 0; col < 2; ++col) {
            const int key = 8 * j + 2 * lane + col;
            sh.half_scores[query][key] = half.score[j][col];
            sh.half_bits[query][key] = half.bits[j][col];
          }
        }
      }
    }
    __syncthreads();
    if (active && warp % 2 == 0 && lane < 4 && query < queries) {
      float* score_row = scores + (q0 + query) * ld;
      uint32_t* bits_row =
          positive == nullptr ? nullptr : positive + (q0 + query) * ld;
      for (int j = 0; j < 8; ++j) {
        for (int col = 0; col < 2; ++col) {
          const int key = 8 * j + 2 * lane + col;
          const int64_t s = s0 + key;
          if (s >= query_end) continue;
          score_row[s] = half.score[j][col] + sh.half_scores[query][key];
          if (bits_row != nullptr) {
            bits_row[s] = half.bits[j][col] | sh.half_bits[query][key];
          }
        }
      }
    }
    __syncthreads();  // the copy after next overwrites this buffer
  }
}

}  // namespace

bool IndexerScoresSupported(ConstMatrixView iq, ConstMatrixView ik,
                            int64_t heads) {
  auto rows_aligned = [](ConstMatrixView v) {
    return v.dtype == ElementType::kF32 &&
           reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && v.stride % 4 == 0;
  };
  return heads > 0 && heads <= kMaxHeads && iq.cols == ik.cols && iq.cols > 0 &&
         iq.cols % 8 == 0 && iq.cols <= kMaxDim && rows_aligned(iq) &&
         rows_aligned(ik);
}

void IndexerScores(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                   ConstMatrixView w, int64_t t0, int64_t count,
                   int64_t key_end, int64_t causal_offset, float scale,
                   float* scores, uint32_t* positive, int64_t ld) {
  assert(IndexerScoresSupported(iq, ik, w.cols));
  assert(t0 >= 0 && t0 + count <= w.rows && iq.rows == w.rows * w.cols);
  assert(key_end <= ik.rows && key_end <= ld);
  if (count == 0 || key_end == 0) return;
  constexpr int64_t kBlockKeys = int64_t{kTilesPerBlock} * kKeys;
  const dim3 grid(
      static_cast<unsigned>((count + kQueries - 1) / kQueries),
      static_cast<unsigned>((key_end + kBlockKeys - 1) / kBlockKeys));
  AllowShared(IndexerScoresKernel, kSharedBytes);
  IndexerScoresKernel<<<grid, kThreads, kSharedBytes, ctx.stream()>>>(
      iq, ik, w, t0, count, key_end, causal_offset, scale, scores, positive,
      ld);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
