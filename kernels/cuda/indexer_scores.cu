#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cute/arch/mma_sm90_gmma.hpp>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/indexer_scores.cuh"
#include "kernels/cuda/wgmma_tiles.cuh"

namespace glm::cuda {
namespace {

// A block scores kQueries queries (kMaxHeads head rows each, zeros past the
// last head) against up to kTilesPerBlock tiles of kKeys keys: the query rows
// are loaded once, each key tile's copy is in flight while the tile before it
// is multiplied (two buffers). Two warpgroups: warpgroup g multiplies rows
// [64 g, 64 g + 64) (queries 2g and 2g + 1) by the key tile with Hopper's
// wgmma (m64n64k8, TF32, both operands read from shared memory); in its
// accumulators warp w of the group holds heads 16 (w % 2) + [0, 16) of query
// 2g + w / 2, so a score sums a warp's heads by a reduce-scatter of shuffles
// and the two warps' halves through shared memory. Rows are kMaxDim floats,
// zeros past dim. Each tile's copies, swizzles and sums are a few hundred
// instructions a warp against sixteen wgmma: their address work is hoisted
// out of the loops (ncu, 2026-12-03: the first wgmma version issued about
// 1,100 instructions a warp a tile and was issue-bound at 8 warps an SM).
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

// Operand tiles in wgmma_tiles.cuh's swizzled layout (dims [32 a, 32 a + 32)
// of a row in atom a).
struct SharedTiles {
  float a[kAtoms][kRows * kAtomFloats];
  float b[2][kAtoms][kKeys * kAtomFloats];
  float half_scores[kQueries][kKeys];  // the odd warps' halves of a score
  uint32_t half_bits[kQueries][kKeys];
};
constexpr size_t kSharedBytes = sizeof(SharedTiles) + 1024;  // + alignment

// Float offset of 16-byte chunk c (of kChunks) of row r in a tile of `rows`.
__device__ __forceinline__ int Swizzled(int rows, int r, int c) {
  return SwizzledChunk(rows, r, c) / static_cast<int>(sizeof(float));
}

// A thread's share of a tile: chunk c = threadIdx.x % kChunks of rows
// threadIdx.x / kChunks + kRowStep * k. Those rows all have the same row % 8,
// so the chunk's swizzled place moves by whole rows from one to the next.
constexpr int kRowStep = kThreads / kChunks;
static_assert(kRowStep % 8 == 0, "a thread's rows share their swizzle");

__device__ __forceinline__ int ThreadChunk() { return threadIdx.x % kChunks; }
__device__ __forceinline__ int ThreadRow() { return threadIdx.x / kChunks; }

// Starts copying `rows` rows of dim floats (row r from row_of(r); null:
// zeros), zeros past dim, into a swizzled tile; any_row: a readable address
// for the zero fills to name.
template <typename RowFn>
__device__ void StartTile(float* tile, int rows, int dim, const float* any_row,
                          RowFn row_of) {
  const int c = ThreadChunk(), r0 = ThreadRow();
  float* dst = tile + Swizzled(rows, r0, c);
  const bool in_dim = 4 * c < dim;
  for (int r = r0; r < rows; r += kRowStep, dst += kRowStep * kAtomFloats) {
    const float* row = in_dim ? row_of(r) : nullptr;
    CopyChunk(dst, row != nullptr ? row + 4 * c : any_row, row != nullptr);
  }
  CommitCopies();
}

// Rounds to TF32 the chunks of a tile this thread copied (StartTile's
// mapping) once they have landed, and makes its writes visible to the
// tensor cores' reads (the async proxy).
__device__ void RoundTile(float* tile, int rows) {
  auto* chunk = reinterpret_cast<float4*>(
      tile + Swizzled(rows, ThreadRow(), ThreadChunk()));
  for (int r = ThreadRow(); r < rows; r += kRowStep) {
    float4 v = *chunk;
    v.x = RoundTf32(v.x);
    v.y = RoundTf32(v.y);
    v.z = RoundTf32(v.z);
    v.w = RoundTf32(v.w);
    *chunk = v;
    chunk += kRowStep * kAtomFloats / 4;
  }
  FenceForTensorCores();
}

// The warpgroup's dots: d[4 j + 2 half + col] is its row 16 w + g + 8 half
// against key 8 j + 2 t + col (w: the warp in the group, g = lane / 4, t =
// lane % 4). a, b: descriptors of the group's 64 rows of atom 0 and of the
// key tile's atom 0; step k reads atom k / 4, 32 bytes further per step
// inside it (descriptor addresses count 16 bytes).
using GroupAcc = float[32];

__device__ void GroupDots(uint64_t a, uint64_t b, GroupAcc& d) {
  using Mma = cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_SS_TN<>;
  constexpr uint64_t kAtomA = kRows * kAtomFloats * sizeof(float) / 16;
  constexpr uint64_t kAtomB = kKeys * kAtomFloats * sizeof(float) / 16;
  for (float& x : d) x = 0.f;
  for (float& x : d) cute::warpgroup_fence_operand(x);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    const uint64_t step = (k % 4) * 2;
    Mma::fma(a + (k / 4) * kAtomA + step, b + (k / 4) * kAtomB + step, d[0],
             d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11],
             d[12], d[13], d[14], d[15], d[16], d[17], d[18], d[19], d[20],
             d[21], d[22], d[23], d[24], d[25], d[26], d[27], d[28], d[29],
             d[30], d[31],
             k == 0 ? cute::SM90::GMMA::ScaleOut::Zero
                    : cute::SM90::GMMA::ScaleOut::One);
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  for (float& x : d) cute::warpgroup_fence_operand(x);
}

// Sums v[i] (i < 2 n) over the lanes that differ in lane bit `bit` and
// keeps half of them: lanes with the bit set the upper n, the others the
// lower n, in v[0, n).
template <int n, typename T, typename Op>
__device__ __forceinline__ void ReduceHalf(T (&v)[16], int bit, Op op) {
  const bool upper = (threadIdx.x >> bit) & 1;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    const T send = upper ? v[i] : v[i + n];
    const T keep = upper ? v[i + n] : v[i];
    v[i] = op(keep, __shfl_xor_sync(0xffffffffu, send, 1 << bit));
  }
}

// A warp's 16 heads summed for key 8 g + 2 t + col of the tile (its share
// of the warp's 64 keys after a reduce-scatter over the eight lanes that
// hold one key's heads), with those heads' positive-dot bits when kBits
// (first_head: the warp's first head).
struct WarpScores {
  float score[2];
  uint32_t bits[2];
};

template <bool kBits>
__device__ WarpScores SumWarpHeads(const GroupAcc& d, const float* weights,
                                   int heads, int first_head, float scale) {
  const int g = (threadIdx.x % 32) / 4;
  float weight[2];
  for (int half = 0; half < 2; ++half) {
    const int h = first_head + g + 8 * half;
    weight[half] = h < heads ? weights[h] : 0.f;
  }
  // v[2 j + col]: this lane's two heads' part for key 8 j + 2 t + col.
  float v[16];
  uint32_t bits[16];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      float score = 0.f;
      uint32_t b = 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float x = scale * d[4 * j + 2 * half + col];
        score += weight[half] * fmaxf(x, 0.f);
        b |= static_cast<uint32_t>(x > 0.f) << (first_head + g + 8 * half);
      }
      v[2 * j + col] = score;
      bits[2 * j + col] = b;
    }
  }
  // Lane bits 4, 3, 2 (g's) halve the keys each: j ends as g.
  auto add = [](float a, float b) { return a + b; };
  auto join = [](uint32_t a, uint32_t b) { return a | b; };
  ReduceHalf<8>(v, 4, add);
  ReduceHalf<4>(v, 3, add);
  ReduceHalf<2>(v, 2, add);
  WarpScores out{{v[0], v[1]}, {0, 0}};
  if (kBits) {
    ReduceHalf<8>(bits, 4, join);
    ReduceHalf<4>(bits, 3, join);
    ReduceHalf<2>(bits, 2, join);
    out.bits[0] = bits[0];
    out.bits[1] = bits[1];
  }
  return out;
}

// Block (x, y): queries t0 + [q0, q0 + kQueries) with q0 counted from the
// last block down (the latest queries see the most keys: they start
// first), keys of tiles [y * kTilesPerBlock, +kTilesPerBlock). kBits:
// positive is written.
template <bool kBits>
__global__ void __launch_bounds__(kThreads, 1)
    IndexerScoresKernel(ConstMatrixView iq, ConstMatrixView ik,
                        ConstMatrixView w, int64_t t0, int64_t count,
                        int64_t key_end, int64_t causal_offset, float scale,
                        float* scores, uint32_t* positive, int64_t ld) {
  extern __shared__ __align__(16) char shared_bytes[];
  SharedTiles& sh = AlignedShared<SharedTiles>(shared_bytes);
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
  const uint64_t a =
      SwizzledDescriptor(sh.a[0] + group * kGroupRows * kAtomFloats);
  const uint64_t b0 = SwizzledDescriptor(sh.b[0][0]),
                 b1 = SwizzledDescriptor(sh.b[1][0]);
  // This lane's keys of a tile after SumWarpHeads: key0 and key0 + 1.
  const int key0 = 8 * (lane / 4) + 2 * (lane % 4);
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
    WarpScores half{};
    if (active) {
      GroupAcc d;
      GroupDots(a, tile % 2 == 0 ? b0 : b1, d);
      half = SumWarpHeads<kBits>(d, weights, heads, 16 * (warp % 2), scale);
      if (warp % 2 == 1) {
        for (int col = 0; col < 2; ++col) {
          sh.half_scores[query][key0 + col] = half.score[col];
          if (kBits) sh.half_bits[query][key0 + col] = half.bits[col];
        }
      }
    }
    __syncthreads();
    if (active && warp % 2 == 0 && query < queries) {
      const int64_t row = q0 + query;
      for (int col = 0; col < 2; ++col) {
        const int64_t s = s0 + key0 + col;
        if (s >= query_end) continue;
        scores[row * ld + s] =
            half.score[col] + sh.half_scores[query][key0 + col];
        if (kBits) {
          positive[row * ld + s] =
              half.bits[col] | sh.half_bits[query][key0 + col];
        }
      }
    }
    __syncthreads();  // the copy after next overwrites this buffer
  }
}

}  // namespace

bool IndexerScoresSupported(ConstMatrixView iq, ConstMatrixView ik,
                            int64_t heads) {
  return heads > 0 && heads <= kMaxHeads && iq.cols == ik.cols && iq.cols > 0 &&
         iq.cols % 8 == 0 && iq.cols <= kMaxDim &&
         ChunkAlignedRows(iq, ElementType::kF32) &&
         ChunkAlignedRows(ik, ElementType::kF32);
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
  auto launch = [&](auto kernel) {
    AllowShared(kernel, kSharedBytes);
    kernel<<<grid, kThreads, kSharedBytes, ctx.stream()>>>(
        iq, ik, w, t0, count, key_end, causal_offset, scale, scores, positive,
        ld);
    GLM_CUDA_CHECK_LAUNCH();
  };
  if (positive != nullptr) {
    launch(IndexerScoresKernel<true>);
  } else {
    launch(IndexerScoresKernel<false>);
  }
}

}  // namespace glm::cuda
