#include <cuda_bf16.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cute/arch/mma_sm90_gmma.hpp>

#include "kernels/cuda/attention_key_sums.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/wgmma_tiles.cuh"

namespace glm::cuda {
namespace {

// A block sums the heads for kQueries queries against kKeys keys. Its
// operands stream through kStages shared buffers, a stage being one 128-byte
// atom of dims (64 bf16) of one head's query rows and key rows (the copies of
// the next kStages - 1 stages in flight while one is multiplied); per head,
// the dots accumulate over the atoms with Hopper's wgmma (m64n128k16, bf16,
// both operands from shared memory; warpgroup g multiplies queries [64 g,
// 64 g + 64)), then each exp(scale dot - lse) is added to the sums kept in
// the accumulators' layout. Every (query, key) pair's heads are summed by one
// thread in order: no shuffles, no atomics. A block reads 128 KB of operands
// a head for 8.4 MFLOP of dots (64 FLOP a byte); blocks run in groups of
// kGroupBlocks query blocks so that a wave's operands stay in L2, and those
// past the causal diagonal return at once.
constexpr int kQueries = 128;
constexpr int kGroupRows = 64;  // queries a warpgroup multiplies
constexpr int kKeys = 128;
constexpr int kMaxDim = 256;
constexpr int kAtomDims =
    kSwizzleBytes / static_cast<int>(sizeof(__nv_bfloat16));
constexpr int kAtoms = kMaxDim / kAtomDims;
constexpr int kDimChunk = kChunkBytes / static_cast<int>(sizeof(__nv_bfloat16));
constexpr int kStepsPerAtom = kAtomDims / 16;  // k16 steps of a product
constexpr int kStages = 6;
constexpr int kThreads = 256;
constexpr int kRowStep = kThreads / kAtomChunks;
constexpr int kGroupBlocks = 8;
static_assert(kThreads / 128 * kGroupRows == kQueries, "a warpgroup per 64");
static_assert(kRowStep % 8 == 0, "a thread's rows share their swizzle");
constexpr float kLog2e = 1.4426950408889634f;

struct SharedTiles {
  char q[kStages][kQueries * kSwizzleBytes];
  char k[kStages][kKeys * kSwizzleBytes];
};
constexpr size_t kSharedBytes = sizeof(SharedTiles) + 1024;  // + alignment

// Starts copying atom `atom` of `rows` rows (row r from row_of(r); null:
// zeros), zeros past dim, into a swizzled one-atom tile; any_row: a readable
// address for the zero fills to name. Thread i copies chunk i % 8 of rows
// i / 8 + kRowStep n.
template <typename RowFn>
__device__ void StartAtom(char* tile, int rows, int atom, int dim,
                          const void* any_row, RowFn row_of) {
  const int c = threadIdx.x % kAtomChunks;
  const int first = (atom * kAtomChunks + c) * kDimChunk;
  const bool in_dim = first < dim;
  for (int r = threadIdx.x / kAtomChunks; r < rows; r += kRowStep) {
    const __nv_bfloat16* row = in_dim ? row_of(r) : nullptr;
    CopyChunk(tile + SwizzledChunk(rows, r, c),
              row != nullptr ? row + first : any_row, row != nullptr);
  }
}

// The warpgroup's dots over one atom of dims, added to d (or written, for
// the first): d[4 j + 2 half + col] is its query 16 w + g + 8 half against
// key 8 j + 2 t + col (w: the warp in the group, g = lane / 4, t = lane %
// 4). a, b: descriptors of the group's 64 query rows and of the key rows;
// step k reads 32 bytes further (descriptor addresses count 16 bytes).
using GroupAcc = float[64];

__device__ void AtomDots(uint64_t a, uint64_t b, bool first, GroupAcc& d) {
  using Mma = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<
      cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  for (float& x : d) cute::warpgroup_fence_operand(x);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kStepsPerAtom; ++k) {
    Mma::fma(a + 2 * k, b + 2 * k, d[0], d[1], d[2], d[3], d[4], d[5], d[6],
             d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16],
             d[17], d[18], d[19], d[20], d[21], d[22], d[23], d[24], d[25],
             d[26], d[27], d[28], d[29], d[30], d[31], d[32], d[33], d[34],
             d[35], d[36], d[37], d[38], d[39], d[40], d[41], d[42], d[43],
             d[44], d[45], d[46], d[47], d[48], d[49], d[50], d[51], d[52],
             d[53], d[54], d[55], d[56], d[57], d[58], d[59], d[60], d[61],
             d[62], d[63],
             first && k == 0 ? cute::SM90::GMMA::ScaleOut::Zero
                             : cute::SM90::GMMA::ScaleOut::One);
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  for (float& x : d) cute::warpgroup_fence_operand(x);
}

// The (query block, key block) of linear block `id`: groups of kGroupBlocks
// query blocks, each group's blocks key block by key block.
__device__ void BlockTile(int id, int query_blocks, int key_blocks, int* qb,
                          int* kb) {
  const int per_group = kGroupBlocks * key_blocks;
  const int first = id / per_group * kGroupBlocks;
  const int size = min(kGroupBlocks, query_blocks - first);
  *qb = first + id % per_group % size;
  *kb = id % per_group / size;
}

// Block: queries t0 + [128 qb, 128 qb + 128), keys [128 kb, 128 kb + 128).
__global__ void __launch_bounds__(kThreads, 1)
    AttentionKeySumsKernel(ConstMatrixView q, ConstMatrixView k, int heads,
                           float scale_log2, const float* lse, int64_t t0,
                           int64_t count, int64_t key_end, bool causal,
                           float* sums, int64_t ld) {
  extern __shared__ __align__(16) char shared_bytes[];
  SharedTiles& sh = AlignedShared<SharedTiles>(shared_bytes);
  int qb, kb;
  BlockTile(blockIdx.x, static_cast<int>((count + kQueries - 1) / kQueries),
            static_cast<int>((key_end + kKeys - 1) / kKeys), &qb, &kb);
  const int64_t q0 = int64_t{qb} * kQueries, s0 = int64_t{kb} * kKeys;
  const int queries = static_cast<int>(std::min<int64_t>(kQueries, count - q0));
  // Keys query q0 + i sees (i counted from q0).
  auto visible_end = [&](int i) {
    return causal ? std::min(key_end, t0 + q0 + i + 1) : key_end;
  };
  if (s0 >= visible_end(queries - 1)) return;
  const int group = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  // Uniform over the warpgroup (wgmma needs all of it): it has queries and
  // its last one sees the block's keys.
  const int group_first = group * kGroupRows;
  const bool active =
      group_first < queries &&
      s0 < visible_end(std::min(group_first + kGroupRows, queries) - 1);
  const int dim = static_cast<int>(q.cols);
  const int stages = heads * kAtoms;
  auto start_stage = [&](int stage) {
    if (stage < stages) {
      const int h = stage / kAtoms, atom = stage % kAtoms;
      StartAtom(sh.q[stage % kStages], kQueries, atom, dim, q.data,
                [&](int r) -> const __nv_bfloat16* {
                  return r < queries ? &Bf16At(q, (t0 + q0 + r) * heads + h, 0)
                                     : nullptr;
                });
      StartAtom(sh.k[stage % kStages], kKeys, atom, dim, k.data,
                [&](int r) -> const __nv_bfloat16* {
                  return s0 + r < key_end ? &Bf16At(k, (s0 + r) * heads + h, 0)
                                          : nullptr;
                });
    }
    CommitCopies();  // empty past the last stage: the wait counts stay exact
  };
  // This lane's queries: row0 and row0 + 8 (from q0); keys: s0 + 8 j +
  // key0 + col.
  const int row0 = group_first + 16 * warp + lane / 4;
  const int key0 = 2 * (lane % 4);
  GroupAcc sum, d;
  for (float& x : d) x = 0.f;  // defined before its first (overwriting) use
  for (int stage = 0; stage < kStages - 1; ++stage) start_stage(stage);
  for (int stage = 0; stage < stages; ++stage) {
    WaitCopies<kStages - 2>();  // this stage's copies have landed
    FenceForTensorCores();
    // Every thread's copies of this stage are visible, and every warpgroup
    // is done with the stage before (its buffer is refilled next).
    __syncthreads();
    start_stage(stage + kStages - 1);
    if (!active) continue;
    const int h = stage / kAtoms, atom = stage % kAtoms;
    AtomDots(
        SwizzledDescriptor(sh.q[stage % kStages] + group_first * kSwizzleBytes),
        SwizzledDescriptor(sh.k[stage % kStages]), atom == 0, d);
    if (atom + 1 < kAtoms) continue;
    float row_lse[2];
    for (int half = 0; half < 2; ++half) {
      const int i = row0 + 8 * half;
      row_lse[half] =
          i < queries ? lse[(t0 + q0 + i) * heads + h] * kLog2e : 0.f;
    }
#pragma unroll
    for (int e = 0; e < 64; ++e) {
      const float p = exp2f(fmaf(d[e], scale_log2, -row_lse[(e / 2) % 2]));
      sum[e] = h == 0 ? p : sum[e] + p;
    }
  }
  if (!active) return;
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    const int i = row0 + 8 * ((e / 2) % 2);
    const int64_t s = s0 + 8 * (e / 4) + key0 + e % 2;
    if (i < queries && s < visible_end(i)) sums[(q0 + i) * ld + s] = sum[e];
  }
}

// Thread per (query, slot): a warp's slots are neighbours in the query's
// list, which lists its keys in key order (the bf16 mode's selections), so
// each head's loads of a warp fall in a few sectors of that head's row.
__global__ void ProbabilityKeySumsKernel(const __nv_bfloat16* probs,
                                         int64_t tokens, int heads,
                                         const int32_t* keys,
                                         MatrixView weights) {
  ForEachElement(weights.rows, weights.cols, [&](int64_t t, int64_t j) {
    const int32_t key = keys[t * weights.cols + j];
    float sum = 0.f;
    if (key >= 0) {
      const __nv_bfloat16* pair = probs + t * tokens + key;
      for (int h = 0; h < heads; ++h) {
        sum += __bfloat162float(pair[h * tokens * tokens]);
      }
    }
    At(weights, t, j) = sum;
  });
}

}  // namespace

bool AttentionKeySumsSupported(ConstMatrixView q, ConstMatrixView k,
                               int64_t heads) {
  return heads > 0 && q.cols == k.cols && q.cols > 0 && q.cols % 8 == 0 &&
         q.cols <= kMaxDim && q.rows % heads == 0 && k.rows % heads == 0 &&
         ChunkAlignedRows(q, ElementType::kBF16) &&
         ChunkAlignedRows(k, ElementType::kBF16);
}

void AttentionKeySums(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                      int64_t heads, float scale, const float* lse, int64_t t0,
                      int64_t count, int64_t key_end, bool causal, float* sums,
                      int64_t ld) {
  assert(AttentionKeySumsSupported(q, k, heads));
  assert(t0 >= 0 && (t0 + count) * heads <= q.rows);
  assert(key_end * heads <= k.rows && key_end <= ld);
  if (count == 0 || key_end == 0) return;
  const int64_t blocks =
      (count + kQueries - 1) / kQueries * ((key_end + kKeys - 1) / kKeys);
  assert(blocks <= INT32_MAX);
  AllowShared(AttentionKeySumsKernel, kSharedBytes);
  AttentionKeySumsKernel<<<static_cast<unsigned>(blocks), kThreads,
                           kSharedBytes, ctx.stream()>>>(
      q, k, static_cast<int>(heads), scale * kLog2e, lse, t0, count, key_end,
      causal, sums, ld);
  GLM_CUDA_CHECK_LAUNCH();
}

void ProbabilityKeySums(CudaContext& ctx, const __nv_bfloat16* probs,
                        int64_t tokens, int64_t heads, const int32_t* keys,
                        MatrixView weights) {
  assert(weights.rows == tokens && weights.dtype == ElementType::kF32);
  assert(heads > 0 && heads <= INT32_MAX);
  if (weights.rows == 0 || weights.cols == 0) return;
  ProbabilityKeySumsKernel<<<GridStrideBlocks(weights.rows * weights.cols),
                             kBlockThreads, 0, ctx.stream()>>>(
      probs, tokens, static_cast<int>(heads), keys, weights);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
