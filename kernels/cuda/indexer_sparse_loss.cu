#include <cassert>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fragment_sums.cuh"
#include "kernels/cuda/indexer_scores.cuh"
#include "kernels/cuda/indexer_sparse_loss.cuh"

namespace glm::cuda {
namespace {

// One block of eight warps a query (SlotLoss's block), mma.sync m16n8k8 on
// TF32. The query's head rows are two m16 blocks (heads [0, 16) and [16,
// 32), zeros past the last head); its selected key rows arrive 32 at a time
// into one of two shared buffers while the other is multiplied. Tiles of 32
// keys keep a top-2048 block under half the SM's shared memory, so two
// blocks share an SM: with 64-key tiles one block an SM stalled on its mma
// chains' fixed latencies with nothing else to issue (ncu, 2026-12-05), and
// the second block made the kernel 1.37x faster (run87, an H100).
constexpr int kThreads = kKlThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeads = 32, kMaxDim = 128, kMaxTopK = 4096;
constexpr int kHeadBlocks = kMaxHeads / 16;
constexpr int kTileKeys = 32;
constexpr int kBlocksPerSm = 2;         // where the layout fits (top-k <= 2048)
constexpr int kDimSteps = kMaxDim / 8;  // k8 steps over a row
// Scores: warp w multiplies head block w / 4 by tile keys [8 (w % 4), +8).
constexpr int kWarpsPerHeadBlock = kWarps / kHeadBlocks;
constexpr int kDotKeys = kTileKeys / kWarpsPerHeadBlock;
constexpr int kDotTiles = kDotKeys / 8;  // n8 tiles of a warp's dots
// The query gradients' product e . K: warp w forms head block w / 4's
// columns [32 (w % 4), +32); the key gradients' e^T . (w iq): warp w the
// rows of tile keys [16 (w / 4), +16), columns [32 (w % 4), +32).
constexpr int kQueryCols = kMaxDim / kWarpsPerHeadBlock;
constexpr int kKeyColBlocks = 4;
constexpr int kKeyCols = kMaxDim / kKeyColBlocks;
static_assert(kTileKeys / 16 * kKeyColBlocks == kWarps, "a warp a key block");
// Row pitches in floats. Key and weighted query rows 4 banks apart, so that
// the scores' B fragments (eight rows, four columns) are conflict-free; the
// score gradients' rows likewise for the query gradients' A fragments.
constexpr int kRowLd = kMaxDim + 4;
constexpr int kGradLd = kTileKeys + 4;
constexpr size_t kMaxSharedBytes = 227 * 1024;  // sm_90's opt-in limit

// c += a b for a 16x8 TF32 A, an 8x8 TF32 B (b0, b1) and fp32 C.
__device__ __forceinline__ void MmaTf32(float (&c)[4], const uint32_t (&a)[4],
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// An fp32 operand as the tensor cores' TF32 (rounded to nearest).
__device__ __forceinline__ uint32_t Tf32(float x) {
  return __float_as_uint(RoundTf32(x));
}
// One already rounded (the score gradients and weighted queries in shared
// memory).
__device__ __forceinline__ uint32_t Bits(float x) { return __float_as_uint(x); }

__device__ __forceinline__ int Lane() { return threadIdx.x % 32; }
__device__ __forceinline__ int Warp() { return threadIdx.x / 32; }
// The fragment's row group (lane / 4) and column (lane % 4).
__device__ __forceinline__ int Group() { return Lane() / 4; }
__device__ __forceinline__ int Quad() { return Lane() % 4; }

struct LossLayout {
  size_t keys, z, target, positive, tiles, grads, weighted_q, partials, total;
};

LossLayout LayoutFor(int64_t topk) {
  LossLayout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t start = at;
    at += (bytes + 15) / 16 * 16;
    return start;
  };
  l.keys = take(topk * sizeof(int32_t));
  l.z = take(topk * sizeof(float));  // scores, then their gradients
  l.target = take(topk * sizeof(float));
  l.positive = take(topk * sizeof(uint32_t));  // heads whose dot is > 0
  l.tiles = take(size_t{2} * kTileKeys * kRowLd * sizeof(float));
  l.grads = take(size_t{kMaxHeads} * kGradLd * sizeof(float));
  l.weighted_q = take(size_t{kMaxHeads} * kRowLd * sizeof(float));
  // Each head block's slot scores and positive bits of a tile; later the
  // head weights' gradient parts of the query gradient's warps.
  static_assert(
      kWarpsPerHeadBlock * kMaxHeads * sizeof(float) <=
          kHeadBlocks * kTileKeys * (sizeof(float) + sizeof(uint32_t)),
      "the dw parts fit the partials");
  l.partials = take(size_t{kHeadBlocks} * kTileKeys *
                    (sizeof(float) + sizeof(uint32_t)));
  l.total = at;
  return l;
}

struct Shared {
  int32_t* keys;
  float *z, *target, *tiles, *grads, *weighted_q, *part_z;
  uint32_t *positive, *part_bits;
};

__device__ Shared Carve(char* base, const LossLayout& l) {
  Shared s;
  s.keys = reinterpret_cast<int32_t*>(base + l.keys);
  s.z = reinterpret_cast<float*>(base + l.z);
  s.target = reinterpret_cast<float*>(base + l.target);
  s.positive = reinterpret_cast<uint32_t*>(base + l.positive);
  s.tiles = reinterpret_cast<float*>(base + l.tiles);
  s.grads = reinterpret_cast<float*>(base + l.grads);
  s.weighted_q = reinterpret_cast<float*>(base + l.weighted_q);
  s.part_z = reinterpret_cast<float*>(base + l.partials);
  s.part_bits = reinterpret_cast<uint32_t*>(s.part_z + kHeadBlocks * kTileKeys);
  return s;
}

struct LossArgs {
  KlProblem p;
  MatrixView diq, dik, dw;
  double* row_loss;
};

// The key token of slot `slot` (-1 for none, or past topk).
__device__ __forceinline__ int32_t SlotKey(const KlProblem& p,
                                           const int32_t* keys, int slot) {
  return slot < p.topk ? keys[slot] : -1;
}

// Starts copying key tile `tile` (slots [64 tile, 64 tile + 64)) of the
// selected ik rows into `to`; -1 slots and slots past topk get zeros.
__device__ void StartKeyTile(const KlProblem& p, const int32_t* keys, int tile,
                             float* to) {
  const int chunks = static_cast<int>(p.ik.cols) / 4;
  for (int i = threadIdx.x; i < kTileKeys * chunks; i += kThreads) {
    const int r = i / chunks, c = 4 * (i % chunks);
    const int32_t key = SlotKey(p, keys, tile * kTileKeys + r);
    CopyChunk(to + r * kRowLd + c, key >= 0 ? &At(p.ik, key, c) : p.ik.data,
              key >= 0);
  }
  CommitCopies();
}

// Calls body(tile, buffer) for each key tile of the query, its rows landed
// in shared memory, the next tile's copies in flight meanwhile.
template <typename Body>
__device__ void ForEachKeyTile(const KlProblem& p, const Shared& s, Body body) {
  const int tiles = (p.topk + kTileKeys - 1) / kTileKeys;
  constexpr int kBuffer = kTileKeys * kRowLd;
  StartKeyTile(p, s.keys, 0, s.tiles);
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) {
      StartKeyTile(p, s.keys, tile + 1, s.tiles + (tile + 1) % 2 * kBuffer);
    } else {
      CommitCopies();  // an empty group: the wait below counts alike
    }
    WaitCopies<1>();
    __syncthreads();  // every thread's copies of this tile
    body(tile, s.tiles + tile % 2 * kBuffer);
    __syncthreads();  // the buffer is rewritten by the next tile's copies
  }
}

// The query's head rows of head block `block` as A fragments, a k8 step of
// its dims each (zeros past the last head and dim).
__device__ void LoadQueryFragments(const KlProblem& p, int64_t t, int block,
                                   uint32_t (&qa)[kDimSteps][4]) {
  const int dim = static_cast<int>(p.ik.cols);
#pragma unroll
  for (int ks = 0; ks < kDimSteps; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = 16 * block + Group() + 8 * (i % 2);
      const int col = 8 * ks + Quad() + 4 * (i / 2);
      qa[ks][i] =
          h < p.heads && col < dim ? Tf32(At(p.iq, t * p.heads + h, col)) : 0u;
    }
  }
}

// The warp's dots of its head block with tile keys [kDotKeys q, +kDotKeys),
// two sums over alternate k steps for two products in flight.
using WarpDotTiles = float[kDotTiles][4];

__device__ void WarpDots(const uint32_t (&qa)[kDimSteps][4], const float* tile,
                         int dim, int q, WarpDotTiles& dots) {
  float part[2][kDotTiles][4] = {};
#pragma unroll
  for (int ks = 0; ks < kDimSteps; ++ks) {
    if (8 * ks >= dim) break;
#pragma unroll
    for (int nt = 0; nt < kDotTiles; ++nt) {
      const float* row =
          tile + (kDotKeys * q + 8 * nt + Group()) * kRowLd + 8 * ks + Quad();
      MmaTf32(part[ks % 2][nt], qa[ks], Tf32(row[0]), Tf32(row[4]));
    }
  }
  for (int nt = 0; nt < kDotTiles; ++nt) {
    for (int e = 0; e < 4; ++e) dots[nt][e] = part[0][nt][e] + part[1][nt][e];
  }
}

// Folds the warp's dots into its head block's part of each tile key's score,
// sum over heads h of w[h] relu(scale dot), and the bits of the heads whose
// scaled dot is positive; lanes 0-3 store them for the tile's columns.
__device__ void FoldHeads(const KlProblem& p, const float (&weight)[2],
                          int block, int q, const WarpDotTiles& dots,
                          float* part_z, uint32_t* part_bits) {
  for (int nt = 0; nt < kDotTiles; ++nt) {
    for (int col = 0; col < 2; ++col) {
      float z = 0.f;
      uint32_t bits = 0;
      for (int half = 0; half < 2; ++half) {
        const int h = 16 * block + Group() + 8 * half;
        const float v = p.scale * dots[nt][2 * half + col];
        if (h < p.heads && v > 0.f) {
          z += weight[half] * v;
          bits |= 1u << h;
        }
      }
      for (int offset = 4; offset < 32; offset *= 2) {
        z += __shfl_xor_sync(0xffffffffu, z, offset);
        bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
      }
      const int key = kDotKeys * q + 8 * nt + 2 * Quad() + col;
      if (Group() == 0) {
        part_z[block * kTileKeys + key] = z;
        part_bits[block * kTileKeys + key] = bits;
      }
    }
  }
}

// First pass: each selected slot's score z[j] and positive heads.
__device__ void ScoreSlots(const KlProblem& p, const Shared& s, int64_t t) {
  const int block = Warp() / kWarpsPerHeadBlock;
  const int q = Warp() % kWarpsPerHeadBlock;
  const int dim = static_cast<int>(p.ik.cols);
  uint32_t qa[kDimSteps][4];
  LoadQueryFragments(p, t, block, qa);
  float weight[2];
  for (int half = 0; half < 2; ++half) {
    const int h = 16 * block + Group() + 8 * half;
    weight[half] = h < p.heads ? At(p.w, t, h) : 0.f;
  }
  ForEachKeyTile(p, s, [&](int tile, const float* keys_tile) {
    WarpDotTiles dots;
    WarpDots(qa, keys_tile, dim, q, dots);
    FoldHeads(p, weight, block, q, dots, s.part_z, s.part_bits);
    __syncthreads();  // both head blocks' parts
    const int slot = tile * kTileKeys + threadIdx.x;
    if (threadIdx.x < kTileKeys && slot < p.topk) {
      s.z[slot] = s.part_z[threadIdx.x] + s.part_z[kTileKeys + threadIdx.x];
      s.positive[slot] =
          s.part_bits[threadIdx.x] | s.part_bits[kTileKeys + threadIdx.x];
    }
  });
}

// grads[h][j] = d loss / d score of tile slot j, times scale, where head h's
// dot with its key is positive; 0 elsewhere (rounded to TF32).
__device__ void FillScoreGrads(const KlProblem& p, const Shared& s, int tile) {
  for (int i = threadIdx.x; i < kMaxHeads * kTileKeys; i += kThreads) {
    const int h = i / kTileKeys, j = i % kTileKeys;
    const int slot = tile * kTileKeys + j;
    const bool active =
        SlotKey(p, s.keys, slot) >= 0 && (s.positive[slot] >> h & 1u) != 0;
    s.grads[h * kGradLd + j] = active ? RoundTf32(s.z[slot] * p.scale) : 0.f;
  }
}

// acc += grads . tile for the warp's head block and columns [32 cb, +32):
// the query's e K over the tile's keys.
__device__ void AddQueryProducts(const float* grads, const float* tile, int dim,
                                 float (&acc)[4][4]) {
  const int block = Warp() / kWarpsPerHeadBlock;
  const int col0 = kQueryCols * (Warp() % kWarpsPerHeadBlock);
  const float* a_row = grads + (16 * block + Group()) * kGradLd + Quad();
#pragma unroll
  for (int ks = 0; ks < kTileKeys / 8; ++ks) {
    const float* a = a_row + 8 * ks;
    const uint32_t af[4] = {Bits(a[0]), Bits(a[8 * kGradLd]), Bits(a[4]),
                            Bits(a[8 * kGradLd + 4])};
    const float* b = tile + (8 * ks + Quad()) * kRowLd + col0 + Group();
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      if (col0 + 8 * nt >= dim) continue;
      MmaTf32(acc[nt], af, Tf32(b[8 * nt]), Tf32(b[4 * kRowLd + 8 * nt]));
    }
  }
}

// dik[key] += (grads^T . weighted_q)[slot] for the tile's slots: the warp's
// 16 keys and 64 columns, summed into dik with atomics.
__device__ void AddKeyGrads(const KlProblem& p, const Shared& s, int tile,
                            const MatrixView& dik) {
  const int keys0 = 16 * (Warp() / kKeyColBlocks);
  const int col0 = kKeyCols * (Warp() % kKeyColBlocks);
  const int dim = static_cast<int>(p.ik.cols);
  float acc[kKeyCols / 8][4] = {};
  for (int ks = 0; 8 * ks < p.heads; ++ks) {
    // A = grads^T: tile keys as rows, heads as k.
    const float* a = s.grads + (8 * ks + Quad()) * kGradLd + keys0 + Group();
    const uint32_t af[4] = {Bits(a[0]), Bits(a[8]), Bits(a[4 * kGradLd]),
                            Bits(a[4 * kGradLd + 8])};
    const float* b = s.weighted_q + (8 * ks + Quad()) * kRowLd + col0 + Group();
#pragma unroll
    for (int nt = 0; nt < kKeyCols / 8; ++nt) {
      if (col0 + 8 * nt >= dim) continue;
      MmaTf32(acc[nt], af, Bits(b[8 * nt]), Bits(b[4 * kRowLd + 8 * nt]));
    }
  }
  const int slot = tile * kTileKeys + keys0 + Group();
  const int32_t key_lo = SlotKey(p, s.keys, slot),
                key_hi = SlotKey(p, s.keys, slot + 8);
#pragma unroll
  for (int nt = 0; nt < kKeyCols / 8; ++nt) {
    if (col0 + 8 * nt < dim) {
      AddFragmentQuads(dik.data, dik.stride, key_lo, key_hi, col0 + 8 * nt,
                       acc[nt]);
    }
  }
}

// weighted_q[h] = w[t,h] iq[t,h] rounded to TF32 (zeros past the last head
// and dim): the key gradients' B operand.
__device__ void FillWeightedQueries(const KlProblem& p, const Shared& s,
                                    int64_t t) {
  const int dim = static_cast<int>(p.ik.cols);
  for (int i = threadIdx.x; i < kMaxHeads * kMaxDim; i += kThreads) {
    const int h = i / kMaxDim, c = i % kMaxDim;
    const bool inside = h < p.heads && c < dim;
    s.weighted_q[h * kRowLd + c] =
        inside ? RoundTf32(At(p.w, t, h) * At(p.iq, t * p.heads + h, c)) : 0.f;
  }
}

// From the warp's part of e K (AddQueryProducts'): diq[t,h] += w[t,h] (e
// K)[h] and dw[t,h] += iq[t,h] . (e K)[h], the latter summed over the four
// column warps of each head block through shared memory (a fixed order).
__device__ void AddQueryGrads(const LossArgs& a, const Shared& s, int64_t t,
                              const float (&acc)[4][4]) {
  const KlProblem& p = a.p;
  const int block = Warp() / kWarpsPerHeadBlock;
  const int part = Warp() % kWarpsPerHeadBlock;
  const int col0 = kQueryCols * part;
  const int dim = static_cast<int>(p.ik.cols);
  float dw[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    for (int e = 0; e < 4; ++e) {
      const int h = 16 * block + Group() + 8 * (e / 2);
      const int col = col0 + 8 * nt + 2 * Quad() + e % 2;
      if (h >= p.heads || col >= dim) continue;
      const int64_t row = t * p.heads + h;
      if (a.diq.data != nullptr)
        At(a.diq, row, col) += At(p.w, t, h) * acc[nt][e];
      dw[e / 2] += At(p.iq, row, col) * acc[nt][e];
    }
  }
  float* parts = s.part_z;  // kWarpsPerHeadBlock x kMaxHeads floats
  for (int half = 0; half < 2; ++half) {
    float v = dw[half];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if (Quad() == 0)
      parts[part * kMaxHeads + 16 * block + Group() + 8 * half] = v;
  }
  __syncthreads();
  const int h = threadIdx.x;
  if (a.dw.data == nullptr || h >= p.heads) return;
  float sum = 0.f;
  for (int w = 0; w < kWarpsPerHeadBlock; ++w) sum += parts[w * kMaxHeads + h];
  At(a.dw, t, h) += sum;
}

// Second pass: the gradients from the slots' score gradients (SlotLoss's z).
__device__ void AddGradients(const LossArgs& a, const Shared& s, int64_t t) {
  const KlProblem& p = a.p;
  const bool query_grads = a.diq.data != nullptr || a.dw.data != nullptr;
  const int dim = static_cast<int>(p.ik.cols);
  if (a.dik.data != nullptr) FillWeightedQueries(p, s, t);
  float acc[4][4] = {};
  ForEachKeyTile(p, s, [&](int tile, const float* keys_tile) {
    FillScoreGrads(p, s, tile);
    __syncthreads();
    if (query_grads) AddQueryProducts(s.grads, keys_tile, dim, acc);
    if (a.dik.data != nullptr) AddKeyGrads(p, s, tile, a.dik);
  });
  if (query_grads) AddQueryGrads(a, s, t, acc);
}

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    SparseLossKernel(LossArgs a, LossLayout layout) {
  extern __shared__ __align__(16) char shared[];
  const Shared s = Carve(shared, layout);
  const KlProblem& p = a.p;
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < p.topk; j += kThreads) {
    s.keys[j] = p.keys[t * p.topk + j];
  }
  __syncthreads();
  ScoreSlots(p, s, t);
  SlotLoss(p, t, s.keys, s.target, s.z, a.row_loss);  // ends with a barrier
  if (a.diq.data == nullptr && a.dik.data == nullptr && a.dw.data == nullptr)
    return;
  AddGradients(a, s, t);
}

}  // namespace

bool SparseIndexerLossSupported(ConstMatrixView iq, ConstMatrixView ik,
                                MatrixView dik, int64_t heads, int64_t topk) {
  return IndexerScoresSupported(iq, ik, heads) &&
         (dik.empty() || ChunkAlignedRows(dik, ElementType::kF32)) &&
         topk > 0 && topk <= kMaxTopK &&
         LayoutFor(topk).total <= kMaxSharedBytes;
}

void SparseIndexerLoss(CudaContext& ctx, const KlProblem& p, int64_t n,
                       MatrixView diq, MatrixView dik, MatrixView dw,
                       double* row_loss) {
  assert(SparseIndexerLossSupported(p.iq, p.ik, dik, p.heads, p.topk));
  if (n == 0) return;
  const LossLayout layout = LayoutFor(p.topk);
  GLM_CUDA_CHECK(cudaFuncSetAttribute(
      SparseLossKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(layout.total)));
  const LossArgs a{p, diq, dik, dw, row_loss};
  SparseLossKernel<<<static_cast<unsigned int>(n), kThreads, layout.total,
                     ctx.stream()>>>(a, layout);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
