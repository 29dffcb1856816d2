#include <algorithm>
#include <cassert>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/indexer_scores.cuh"

namespace glm::cuda {
namespace {

// A block scores kQueries queries (kMaxHeads head rows each, zeros past the
// last head) against up to kTilesPerBlock tiles of kKeys keys, the query
// rows loaded once and each key tile's copy in flight while the one before
// it is multiplied (two buffers). Eight warps: warp w takes query w / 2 and
// the tile's keys [kWarpKeys * (w % 2), +kWarpKeys), as two m16 x four n8
// accumulator tiles of mma.sync m16n8k8 (TF32): all of a query's heads in one
// warp, so its score sums them by shuffles. Rows are kMaxDim floats, zeros
// past dim: the unrolled product always runs kMaxDim / 8 steps.
constexpr int kMaxHeads = 32;
constexpr int kQueries = 4;
constexpr int kRows = kQueries * kMaxHeads;
constexpr int kKeys = 64;
constexpr int kWarpKeys = 32;
constexpr int kMaxDim = 128;
constexpr int kChunks = kMaxDim / 4;  // 16-byte chunks a row
constexpr int kSteps = kMaxDim / 8;   // k8 steps of a product
constexpr int kTilesPerBlock = 16;
constexpr int kThreads = 256;
static_assert(kThreads / 32 == kQueries * (kKeys / kWarpKeys),
              "a warp per query and half key tile");

// Operand rows in shared memory. 16-byte chunk c of row r lies at chunk c ^
// (r % 8): ldmatrix's eight rows of one chunk then fall in eight different
// bank groups.
struct SharedTiles {
  float a[kRows * kMaxDim];
  float b[2][kKeys * kMaxDim];
};

__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * kMaxDim + ((chunk ^ (row & 7)) << 2);
}

// cp.async of 16 bytes, zero-filled (src not read) when !valid.
__device__ __forceinline__ void CopyChunk(float* dst, const float* src,
                                          bool valid) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void CommitCopies() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits for this thread's copies but the `pending` latest groups.
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
// zeros), zeros past dim, into swizzled shared rows; any_row: a readable
// address for the zero fills to name.
template <typename RowFn>
__device__ void StartTile(float* tile, int rows, int dim, const float* any_row,
                          RowFn row_of) {
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const float* row = row_of(r);
    const bool valid = row != nullptr && 4 * c < dim;
    CopyChunk(tile + Swizzled(r, c), valid ? row + 4 * c : any_row, valid);
  }
  CommitCopies();
}

// Rounds to TF32 the chunks of a tile this thread copied (StartTile's
// mapping), once they have landed.
__device__ void RoundTile(float* tile, int rows) {
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    auto* chunk =
        reinterpret_cast<float4*>(tile + Swizzled(i / kChunks, i % kChunks));
    float4 v = *chunk;
    v.x = RoundTf32(v.x);
    v.y = RoundTf32(v.y);
    v.z = RoundTf32(v.z);
    v.w = RoundTf32(v.w);
    *chunk = v;
  }
}

// Four 8x4 fp32 matrices (ldmatrix's 8x8 b16 ones): lane l names row l % 8
// of matrix l / 8 and gets element (l / 4, l % 4) of each.
__device__ __forceinline__ void LoadMatrices(const float* row,
                                             uint32_t (&m)[4]) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
      : "r"(address));
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The warp's dots in mma's accumulator layout: acc[i][j][2 * half + col] is
// head 16 i + g + 8 half of the query against key key0 + 8 j + 2 t + col
// (g = lane / 4, t = lane % 4).
using WarpAcc = float[2][4][4];

// One k8 step's fragments: A rows 0-7 / 8-15 of dims 8k..8k+3, then of
// 8k+4..8k+7 (a0..a3) for each m16 tile; B keys 16 p + 0..7 (b0, b1 of n8
// tile 2p), then 16 p + 8..15.
struct Fragments {
  uint32_t a[2][4];
  uint32_t b[2][4];
};

__device__ __forceinline__ void LoadFragments(const float* a, const float* b,
                                              int query, int key0, int k,
                                              Fragments& f) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = query * kMaxHeads + 16 * i + (lane & 15);
    LoadMatrices(a + Swizzled(row, 2 * k + (lane >> 4)), f.a[i]);
  }
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int key = key0 + 16 * p + ((lane >> 4) << 3) + (lane & 7);
    LoadMatrices(b + Swizzled(key, 2 * k + ((lane >> 3) & 1)), f.b[p]);
  }
}

// The next step's fragments load while this step's products run.
__device__ void WarpDots(const float* a, const float* b, int query, int key0,
                         WarpAcc& acc) {
  for (auto& tile : acc) {
    for (auto& n : tile) {
      for (float& x : n) x = 0.f;
    }
  }
  Fragments f[2];
  LoadFragments(a, b, query, key0, 0, f[0]);
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    if (k + 1 < kSteps) LoadFragments(a, b, query, key0, k + 1, f[(k + 1) % 2]);
    const Fragments& now = f[k % 2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        Mma(acc[i][j], now.a[i], now.b[j / 2][2 * (j % 2)],
            now.b[j / 2][2 * (j % 2) + 1]);
      }
    }
  }
}

// Sums the warp's dots over heads into scores (and their positive heads'
// bits) for keys s0 + [0, kWarpKeys) below key_limit: each lane its four
// heads, then a butterfly over the eight lanes that share its keys.
__device__ void WriteScores(const WarpAcc& acc, const float* weights, int heads,
                            float scale, int64_t s0, int64_t key_limit,
                            float* scores, uint32_t* positive) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float weight[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = 16 * i + g + 8 * half;
      weight[i][half] = h < heads ? weights[h] : 0.f;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      float score = 0.f;
      uint32_t bits = 0;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float x = scale * acc[i][j][2 * half + col];
          score += weight[i][half] * fmaxf(x, 0.f);
          bits |= static_cast<uint32_t>(x > 0.f) << (16 * i + g + 8 * half);
        }
      }
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) {
        score += __shfl_xor_sync(0xffffffffu, score, offset);
        bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
      }
      const int64_t s = s0 + 8 * j + 2 * t + col;
      if (g == 0 && s < key_limit) {
        scores[s] = score;
        if (positive != nullptr) positive[s] = bits;
      }
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
  extern __shared__ __align__(16) float shared[];
  SharedTiles& sh = *reinterpret_cast<SharedTiles*>(shared);
  const int64_t q0 = int64_t{gridDim.x - 1 - blockIdx.x} * kQueries;
  const int queries = static_cast<int>(std::min<int64_t>(kQueries, count - q0));
  // Keys any of the block's queries sees, and those of the warp's query.
  auto visible_end = [&](int64_t query) {
    return causal_offset < 0
               ? key_end
               : std::min(key_end, causal_offset + t0 + query + 1);
  };
  const int64_t block_end = visible_end(q0 + queries - 1);
  const int64_t first_key = int64_t{blockIdx.y} * kTilesPerBlock * kKeys;
  if (first_key >= block_end) return;
  const int64_t last_key =
      std::min(block_end, first_key + kTilesPerBlock * kKeys);
  const int tiles =
      static_cast<int>((last_key - first_key + kKeys - 1) / kKeys);
  const int heads = static_cast<int>(w.cols), dim = static_cast<int>(iq.cols);
  StartTile(sh.a, kRows, dim, iq.data, [&](int r) -> const float* {
    const int q = r / kMaxHeads, h = r % kMaxHeads;
    return q < queries && h < heads ? &At(iq, (t0 + q0 + q) * heads + h, 0)
                                    : nullptr;
  });
  auto start_keys = [&](int tile) {
    const int64_t s0 = first_key + int64_t{tile} * kKeys;
    StartTile(sh.b[tile % 2], kKeys, dim, ik.data, [&](int r) -> const float* {
      return s0 + r < block_end ? &At(ik, s0 + r, 0) : nullptr;
    });
  };
  start_keys(0);
  const int warp = threadIdx.x / 32, query = warp / 2;
  const int key_offset = (warp % 2) * kWarpKeys;
  const int64_t query_end = visible_end(q0 + query);
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      start_keys(tile + 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    if (tile == 0) RoundTile(sh.a, kRows);
    RoundTile(sh.b[tile % 2], kKeys);
    __syncthreads();
    const int64_t s0 = first_key + int64_t{tile} * kKeys + key_offset;
    // Uniform over the warp: its shuffles and ldmatrix need every lane.
    if (query < queries && s0 < query_end) {
      WarpAcc acc;
      WarpDots(sh.a, sh.b[tile % 2], query, key_offset, acc);
      const int64_t row = q0 + query;
      WriteScores(acc, &At(w, t0 + row, 0), heads, scale, s0, query_end,
                  scores + row * ld,
                  positive == nullptr ? nullptr : positive + row * ld);
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
  AllowShared(IndexerScoresKernel, sizeof(SharedTiles));  // 128 KiB
  IndexerScoresKernel<<<grid, kThreads, sizeof(SharedTiles), ctx.stream()>>>(
      iq, ik, w, t0, count, key_end, causal_offset, scale, scores, positive,
      ld);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
