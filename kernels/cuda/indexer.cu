#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/indexer_scores.cuh"
#include "kernels/cuda/indexer_slot_loss.cuh"
#include "kernels/cuda/indexer_sparse_loss.cuh"
#include "kernels/cuda/linear.cuh"

namespace glm::cuda {
namespace {

constexpr int kMaxHeads = 32;
constexpr int64_t kMaxTopK = 4096;
// What one chunk of queries may hold in scratch (scores or score gradients).
constexpr size_t kChunkBytes = size_t{512} << 20;
constexpr int64_t kMaxChunk = 65535;
// The most IndexerTopK keeps for the loss (scores and positive-head bits, 8
// bytes a pair): 67 MB for a 4k sequence's queries past top-2048, 403 MB at
// 8k; longer sequences score their loss again instead.
constexpr size_t kKeptScoresBytes = size_t{1} << 30;

// Queries per chunk when each takes `bytes_per_query` of scratch; at most
// kMaxChunk, so a chunk fits a grid's y dimension.
int64_t ChunkQueries(int64_t n, size_t bytes_per_query) {
  const int64_t fit = static_cast<int64_t>(kChunkBytes / bytes_per_query);
  return std::max<int64_t>(1, std::min({n, fit, kMaxChunk}));
}

// acc + a * b with two roundings, never fused: the CPU build has no FMA, and
// scores equal to the CPU's give the same top-k selections, ties included.
__device__ float MulAdd(float a, float b, float acc) {
  return __fadd_rn(acc, __fmul_rn(a, b));
}

// Row r of a view.
template <typename View>
__device__ auto* RowOf(const View& m, int64_t r) {
  return &At(m, r, 0);
}

// ---- Dot-product tiles (top-k scores and the loss's dots) ----

// A tile is kTileA rows of A x kTileB rows of B, the rows staged kTileD
// columns at a time; each thread owns kThreadA x kThreadB dots (A rows
// ty + kLanesA*i, B rows tx + kLanesB*j: conflict-free shared reads).
constexpr int kTileA = 32;
constexpr int kTileB = 64;
constexpr int kTileD = 32;
constexpr int kThreadA = 2;
constexpr int kThreadB = 4;
constexpr int kLanesA = kTileA / kThreadA;
constexpr int kLanesB = kTileB / kThreadB;
constexpr int kTileThreads = kLanesA * kLanesB;
static_assert(kTileA == 32, "one warp reads a score tile's sequence starts");
static_assert(kTileA >= kMaxHeads, "a loss tile holds every head");

using TileDotsOut = float[kThreadA][kThreadB];

// Stages columns [c0, c0 + width) of rows r < rows into tile[c][r]
// (transposed, so the dot loop reads along rows). Rows past `rows` or whose
// row_of is null read as 0.
template <int kRows, typename RowFn>
__device__ void StageTile(float (*tile)[kRows + 1], int rows, int64_t c0,
                          int width, RowFn row_of) {
  for (int i = threadIdx.x; i < kRows * kTileD; i += kTileThreads) {
    const int r = i / kTileD, c = i % kTileD;
    const float* row = r < rows ? row_of(r) : nullptr;
    tile[c][r] = row != nullptr && c < width ? row[c0 + c] : 0.f;
  }
}

// dot[i][j] = a_row(ty + kLanesA*i) . b_row(tx + kLanesB*j) over `dim`
// columns, summed in column order with MulAdd: bitwise the CPU's dots.
template <typename ARowFn, typename BRowFn>
__device__ void TileDots(int a_rows, int b_rows, int64_t dim, ARowFn a_row,
                         BRowFn b_row, TileDotsOut& dot) {
  __shared__ float a_tile[kTileD][kTileA + 1];
  __shared__ float b_tile[kTileD][kTileB + 1];
  const int tx = threadIdx.x % kLanesB, ty = threadIdx.x / kLanesB;
  for (int i = 0; i < kThreadA; ++i) {
    for (int j = 0; j < kThreadB; ++j) dot[i][j] = 0.f;
  }
  for (int64_t c0 = 0; c0 < dim; c0 += kTileD) {
    const int width = static_cast<int>(std::min<int64_t>(kTileD, dim - c0));
    StageTile<kTileA>(a_tile, a_rows, c0, width, a_row);
    StageTile<kTileB>(b_tile, b_rows, c0, width, b_row);
    __syncthreads();
    for (int c = 0; c < width; ++c) {
#pragma unroll
      for (int i = 0; i < kThreadA; ++i) {
        const float a = a_tile[c][ty + kLanesA * i];
#pragma unroll
        for (int j = 0; j < kThreadB; ++j) {
          dot[i][j] = MulAdd(a, b_tile[c][tx + kLanesB * j], dot[i][j]);
        }
      }
    }
    __syncthreads();
  }
}

// Calls emit(a, b, value) for each of the thread's dots inside the tile.
template <typename EmitFn>
__device__ void ForTileDots(int a_rows, int b_rows, const TileDotsOut& dot,
                            EmitFn emit) {
  const int tx = threadIdx.x % kLanesB, ty = threadIdx.x / kLanesB;
#pragma unroll
  for (int i = 0; i < kThreadA; ++i) {
#pragma unroll
    for (int j = 0; j < kThreadB; ++j) {
      const int a = ty + kLanesA * i, b = tx + kLanesB * j;
      if (a < a_rows && b < b_rows) emit(a, b, dot[i][j]);
    }
  }
}

// ---- Top-k: scores of a chunk of queries ----

// The smallest sequence start among the tile's `rows` queries from row0.
__device__ int32_t LowestStart(const int32_t* seq_start, int64_t row0,
                               int rows) {
  __shared__ int32_t lowest;
  if (threadIdx.x < 32) {
    const int32_t start =
        threadIdx.x < rows ? seq_start[row0 + threadIdx.x] : INT_MAX;
    const int32_t min = __reduce_min_sync(0xffffffff, start);
    if (threadIdx.x == 0) lowest = min;
  }
  __syncthreads();
  return lowest;
}

// scores[(t - t0) * ld + s] for queries t in [t0, t1) and keys s <= t's g,
// a tile of kTileA queries x kTileB keys per block. Tiles outside every
// query's [seq_start, g] range are skipped; entries of a computed tile outside
// a query's range are written but never read.
__global__ void ScoreKernel(ConstMatrixView iq, ConstMatrixView ik,
                            ConstMatrixView w, const int32_t* seq_start,
                            int64_t query_offset, int64_t t0, int64_t t1,
                            float scale, float* scores, int64_t ld) {
  const int64_t row0 = t0 + blockIdx.y * kTileA;
  const int rows = static_cast<int>(std::min<int64_t>(kTileA, t1 - row0));
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTileB;
  const int64_t key_end = query_offset + row0 + rows;  // past the last g
  if (s0 >= key_end) return;
  if (s0 + kTileB <= LowestStart(seq_start, row0, rows)) return;
  const int keys = static_cast<int>(std::min<int64_t>(kTileB, key_end - s0));
  const int64_t heads = w.cols;
  float score[kThreadA][kThreadB] = {};
  for (int64_t h = 0; h < heads; ++h) {
    TileDotsOut dot;
    TileDots(
        rows, keys, ik.cols,
        [&](int r) { return RowOf(iq, (row0 + r) * heads + h); },
        [&](int r) { return RowOf(ik, s0 + r); }, dot);
    const int ty = threadIdx.x / kLanesB;
#pragma unroll
    for (int i = 0; i < kThreadA; ++i) {
      const int r = ty + kLanesA * i;
      const float weight = r < rows ? RowOf(w, row0 + r)[h] : 0.f;
#pragma unroll
      for (int j = 0; j < kThreadB; ++j) {
        score[i][j] =
            MulAdd(weight, fmaxf(scale * dot[i][j], 0.f), score[i][j]);
      }
    }
  }
  ForTileDots(rows, keys, score, [&](int r, int k, float value) {
    scores[(row0 - t0 + r) * ld + s0 + k] = value;
  });
}

// ---- Top-k: selection per query ----

constexpr int kSelectThreads = 512;
constexpr int kRadixBins = 256;
constexpr int kBinsPerLane = kRadixBins / 32;

// A float's bits as an unsigned with the same order; -0 ranks as +0, as in a
// float comparison.
__device__ uint32_t OrderedBits(float x) {
  const uint32_t bits = __float_as_uint(x == 0.f ? 0.f : x);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Key token s with score x ranks above every key with a lower RankKey: higher
// score first, then lower index. Never 0 (the sort pads with 0).
__device__ uint64_t RankKey(float x, int64_t s) {
  return (uint64_t{OrderedBits(x)} << 32) |
         (0xffffffffu - static_cast<uint32_t>(s));
}

__device__ int32_t TokenOf(uint64_t rank_key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(rank_key));
}

// Run by warp 0 over a histogram: the bin b where, counting from the top bin
// down, the entries above b number fewer than `remaining` and those up to b
// at least `remaining`. Writes b and the count above it.
__device__ void FindBin(const int* hist, int remaining, int* bin, int* above) {
  const int lane = threadIdx.x;
  const int top = kRadixBins - 1 - lane * kBinsPerLane;  // lane's highest bin
  int sum = 0;
  for (int k = 0; k < kBinsPerLane; ++k) sum += hist[top - k];
  int inclusive = sum;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int up = __shfl_up_sync(0xffffffff, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  int count = inclusive - sum;
  if (count >= remaining || remaining > inclusive) return;
  for (int b = top;; --b) {
    if (count + hist[b] >= remaining) {
      *bin = b;
      *above = count;
      return;
    }
    count += hist[b];
  }
}

// The selection of the `kept` highest rank keys of a row, as a threshold: an
// entry is selected iff (RankKey & mask) >= prefix. Radix select over 8-bit
// digits, most significant first; stops once the boundary digit's bin is
// taken whole (rank keys are distinct, so at the latest after the last digit).
struct Threshold {
  uint64_t prefix = 0;
  uint64_t mask = 0;
};

__device__ Threshold RadixThreshold(const float* row, int64_t first, int count,
                                    int kept) {
  __shared__ int hist[kRadixBins];
  __shared__ int chosen_bin, chosen_above;
  Threshold threshold;
  int remaining = kept;  // still to take among entries matching the prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const uint64_t key = RankKey(row[i], first + i);
      if ((key & threshold.mask) == threshold.prefix) {
        atomicAdd(&hist[(key >> shift) & 0xff], 1);  // order-free count
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) FindBin(hist, remaining, &chosen_bin, &chosen_above);
    __syncthreads();
    const int bin = chosen_bin, in_bin = hist[bin];
    threshold.prefix |= uint64_t(bin) << shift;
    threshold.mask |= uint64_t{0xff} << shift;
    remaining -= chosen_above;
    __syncthreads();  // the next pass rewrites hist and chosen_*
    if (in_bin == remaining) break;
  }
  return threshold;
}

// Sorts keys[0, size) in descending order; size is a power of two.
__device__ void BitonicSortDescending(uint64_t* keys, int size) {
  for (int k = 2; k <= size; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner <= i) continue;
        const uint64_t a = keys[i], b = keys[partner];
        if ((i & k) == 0 ? a < b : a > b) {
          keys[i] = b;
          keys[partner] = a;
        }
      }
      __syncthreads();
    }
  }
}

// A query's row of scores and the threshold that selects its best keys.
struct RowSelection {
  int64_t t;      // the query
  int64_t first;  // its first key (its sequence's start)
  int count;      // keys it sees
  int kept;       // keys it selects: min(topk, count)
  const float* row;
  Threshold threshold;
};

// Query t0 + blockIdx.x's selection; called by the whole block.
__device__ RowSelection SelectRow(const float* scores, int64_t ld,
                                  const int32_t* seq_start,
                                  int64_t query_offset, int64_t t0, int topk) {
  RowSelection r;
  r.t = t0 + blockIdx.x;
  r.first = seq_start[r.t];
  r.count =
      static_cast<int>(std::max<int64_t>(0, query_offset + r.t - r.first + 1));
  r.kept = min(topk, r.count);
  r.row = scores + blockIdx.x * ld + r.first;
  // Short rows keep every key: the empty threshold passes all.
  if (r.count > topk) {
    r.threshold = RadixThreshold(r.row, r.first, r.count, r.kept);
  }
  return r;
}

__device__ bool Selected(const RowSelection& r, int i) {
  const uint64_t key = RankKey(r.row[i], r.first + i);
  return (key & r.threshold.mask) >= r.threshold.prefix;
}

// One block per query of the chunk: its best keys, best first, -1 after them.
// Shared memory: sort_size rank keys (sort_size: a power of two >= topk).
__global__ void SelectKernel(const float* scores, int64_t ld,
                             const int32_t* seq_start, int64_t query_offset,
                             int64_t t0, int topk, int sort_size,
                             int32_t* keys) {
  extern __shared__ uint64_t picked[];
  __shared__ int picked_count;
  const RowSelection r =
      SelectRow(scores, ld, seq_start, query_offset, t0, topk);
  if (threadIdx.x == 0) picked_count = 0;
  for (int i = threadIdx.x; i < sort_size; i += blockDim.x) picked[i] = 0;
  __syncthreads();
  // Slots come in any order; the sort below fixes it.
  for (int i = threadIdx.x; i < r.count; i += blockDim.x) {
    if (Selected(r, i)) {
      picked[atomicAdd(&picked_count, 1)] = RankKey(r.row[i], r.first + i);
    }
  }
  __syncthreads();
  BitonicSortDescending(picked, sort_size);
  int32_t* out = keys + r.t * topk;
  for (int j = threadIdx.x; j < topk; j += blockDim.x) {
    out[j] = j < r.kept ? TokenOf(picked[j]) : -1;
  }
}

// SelectKernel's selection listed in key order (no sort): each tile of
// kSelectThreads keys writes its selected ones after the tiles before it.
__global__ void SelectInKeyOrderKernel(const float* scores, int64_t ld,
                                       const int32_t* seq_start,
                                       int64_t query_offset, int64_t t0,
                                       int topk, int32_t* keys) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan;
  const RowSelection r =
      SelectRow(scores, ld, seq_start, query_offset, t0, topk);
  int32_t* out = keys + r.t * topk;
  int written = 0;
  for (int base = 0; base < r.count; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const int selected = i < r.count && Selected(r, i) ? 1 : 0;
    int slot, in_tile;
    Scan(scan).ExclusiveSum(selected, slot, in_tile);
    if (selected) out[written + slot] = static_cast<int32_t>(r.first + i);
    written += in_tile;
    __syncthreads();  // the next tile's scan reuses the storage
  }
  for (int j = r.kept + threadIdx.x; j < topk; j += blockDim.x) out[j] = -1;
}

// keys[t] for a query t that sees at most topk keys, so selects all of
// them: seq_start[t] up to its own token g = query_offset + t, in key order,
// then -1.
__global__ void AllVisibleKeysKernel(const int32_t* seq_start,
                                     int64_t query_offset, int topk,
                                     int32_t* keys) {
  const int64_t t = blockIdx.x;
  const int32_t first = seq_start[t];
  const int64_t seen = query_offset + t - first + 1;
  int32_t* out = keys + t * topk;
  for (int j = threadIdx.x; j < topk; j += blockDim.x) {
    out[j] = j < seen ? static_cast<int32_t>(first + j) : -1;
  }
}

int PowerOfTwoAtLeast(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// ---- KL loss ----

// The per-query path (bitwise the CPU's): a chunk's score gradients live in
// dot_grad [chunk, heads, topk], first the dots, then d loss / d dot.

// dots[h][j] = iq[t,h] . ik[keys[t][j]] for query t = t0 + blockIdx.y and
// slots j of tile blockIdx.x (-1 slots give 0), bitwise as the CPU's.
__global__ void DotsKernel(KlProblem p, int64_t t0, float* dot_grad) {
  const int64_t t = t0 + blockIdx.y;
  const int j0 = blockIdx.x * kTileB;
  const int slots = min(kTileB, p.topk - j0);
  const int32_t* selected = p.keys + t * p.topk + j0;
  TileDotsOut dot;
  TileDots(
      p.heads, slots, p.ik.cols,
      [&](int h) { return RowOf(p.iq, t * p.heads + h); },
      [&](int j) {
        const int32_t s = selected[j];
        return s < 0 ? nullptr : RowOf(p.ik, s);
      },
      dot);
  float* dots = dot_grad + int64_t{blockIdx.y} * p.heads * p.topk + j0;
  ForTileDots(p.heads, slots, dot,
              [&](int h, int j, float value) { dots[h * p.topk + j] = value; });
}

// dw[t][h] += sum over selected slots j, in order, of dz[j] * relu(scale *
// dots[h][j]); one thread per head.
__device__ void AccumulateWeightGrad(const KlProblem& p,
                                     const int32_t* selected, const float* dz,
                                     const float* dots, float* dw_row) {
  const int h = threadIdx.x;
  if (h >= p.heads) return;
  float acc = dw_row[h];
  for (int j = 0; j < p.topk; ++j) {
    if (selected[j] < 0) continue;
    acc += dz[j] * fmaxf(p.scale * dots[h * p.topk + j], 0.f);
  }
  dw_row[h] = acc;
}

// d loss / d dot for a dot of head h whose slot's score gradient is dz: dz *
// w[h] * scale where the ReLU is active, 0 elsewhere.
__device__ float DotGrad(const KlProblem& p, float dot, float dz, float w) {
  return p.scale * dot <= 0.f ? 0.f : dz * w * p.scale;
}

// Replaces each dot by d loss / d dot (0 on -1 slots).
__device__ void DotGrads(const KlProblem& p, const int32_t* selected,
                         const float* dz, const float* weights, float* dots) {
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    const bool valid = selected[j] >= 0;
    for (int h = 0; h < p.heads; ++h) {
      float* g = dots + h * p.topk + j;
      *g = valid ? DotGrad(p, *g, dz[j], weights[h]) : 0.f;
    }
  }
}

// A query's score over one key from its heads' dots (dot(h) = the dot of
// head h), heads in order as the CPU sums them.
template <typename Dot>
__device__ float SlotScore(const KlProblem& p, const float* weights, Dot dot) {
  float score = 0.f;
  for (int h = 0; h < p.heads; ++h) {
    score = MulAdd(weights[h], fmaxf(p.scale * dot(h), 0.f), score);
  }
  return score;
}

// One block per query t = t0 + blockIdx.x, after DotsKernel: its loss into
// row_loss[t], its dw row, and its dots turned into their gradients. Shared
// memory: topk floats (targets) and topk floats (scores, then d loss / d
// score).
__global__ void KlRowKernel(KlProblem p, int64_t t0, float* dot_grad,
                            double* row_loss, MatrixView dw) {
  extern __shared__ float target[];
  float* z = target + p.topk;
  const int64_t t = t0 + blockIdx.x;
  const int32_t* selected = p.keys + t * p.topk;
  const float* weights = RowOf(p.w, t);
  // Not restrict: read and rewritten by other threads across barriers.
  float* dots = dot_grad + int64_t{blockIdx.x} * p.heads * p.topk;
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    if (selected[j] < 0) continue;
    z[j] = SlotScore(p, weights, [&](int h) { return dots[h * p.topk + j]; });
  }
  SlotLoss(p, t, selected, target, z, row_loss);
  if (dw.data != nullptr) {
    AccumulateWeightGrad(p, selected, z, dots, RowOf(dw, t));
  }
  __syncthreads();
  DotGrads(p, selected, z, weights, dots);
}

// Shared memory of DenseKlRowKernel: per slot its target, its score (then
// its gradient) and the heads whose dot is positive (a bit each), and each
// key's slot. About 32 KiB at top-k 2048 and 4096 keys, so that several
// blocks share an SM: the kernel streams its rows and needs many in flight.
size_t DenseKlRowShared(int64_t topk, int64_t key_end) {
  return topk * (2 * sizeof(float) + sizeof(uint32_t)) +
         key_end * sizeof(int16_t);
}

// KlRowKernel for the dense path: one block per query t = t0 + blockIdx.x of
// a chunk whose scores with keys [0, key_end) are the row scores[(t - t0) *
// scores_ld + s], the heads whose dots are positive the same row of
// positive_heads (IndexerScores). The selected keys' entries give each
// slot's score and active heads; after the loss, the query's rows of grads
// (bf16, leading dimension grads_ld, a multiple of 8; row (t - t0)*heads + h)
// get e[h][s] = d loss / d z_s * scale where head h's dot with key s is
// positive, 0 elsewhere and at keys not selected: written, never read back. d
// loss / d dot[h][s] = w[h] * e[h][s], and d loss / d w[h] = sum_s e[h][s]
// dot[h][s], which DenseKlLoss takes from the product e ik (QueryGrads). Keys
// are walked in order (coalesced rows) and found in the query's slots through a
// key -> slot map.
constexpr int kGradKeys = 8;  // bf16 gradients a 16-byte store
__global__ void __launch_bounds__(kKlThreads, 5)
    DenseKlRowKernel(KlProblem p, int64_t t0, int key_end, const float* scores,
                     const uint32_t* positive_heads, int64_t scores_ld,
                     __nv_bfloat16* grads, int64_t grads_ld, double* row_loss) {
  extern __shared__ float target[];
  float* z = target + p.topk;
  auto* positive = reinterpret_cast<uint32_t*>(z + p.topk);
  auto* slot_of = reinterpret_cast<int16_t*>(positive + p.topk);
  const int64_t t = t0 + blockIdx.x;
  const int32_t* selected = p.keys + t * p.topk;
  const int64_t row = int64_t{blockIdx.x} * scores_ld;
  __nv_bfloat16* grad_rows = grads + int64_t{blockIdx.x} * p.heads * grads_ld;
  for (int s = threadIdx.x; s < key_end; s += kKlThreads) slot_of[s] = -1;
  __syncthreads();
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    const int32_t s = selected[j];
    if (s < 0) continue;
    slot_of[s] = static_cast<int16_t>(j);
    z[j] = scores[row + s];
    positive[j] = positive_heads[row + s];
  }
  __syncthreads();
  SlotLoss(p, t, selected, target, z, row_loss);
  // Eight keys a thread, so that each head's row is written 16 bytes a
  // store (the rows are write-bound); keys from key_end up to the next
  // multiple of 8 (inside grads_ld) get 0.
  for (int s0 = kGradKeys * threadIdx.x; s0 < key_end;
       s0 += kGradKeys * kKlThreads) {
    float dz[kGradKeys];
    uint32_t active[kGradKeys];
#pragma unroll
    for (int i = 0; i < kGradKeys; ++i) {
      const int j = s0 + i < key_end ? slot_of[s0 + i] : -1;
      dz[i] = j < 0 ? 0.f : z[j] * p.scale;
      active[i] = j < 0 ? 0u : positive[j];
    }
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
      if (h >= p.heads) break;
      uint4 packed;
      auto* pair = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
      for (int i = 0; i < kGradKeys; i += 2) {
        pair[i / 2] = __floats2bfloat162_rn(
            (active[i] >> h & 1u) != 0 ? dz[i] : 0.f,
            (active[i + 1] >> h & 1u) != 0 ? dz[i + 1] : 0.f);
      }
      *reinterpret_cast<uint4*>(grad_rows + h * grads_ld + s0) = packed;
    }
  }
}

// Rows [count*heads, dim] of iq scaled by their head weights: w[t,h] iq[t,h],
// the operand whose product with e gives the key gradients.
__global__ void WeightedQueriesKernel(KlProblem p, int64_t t0, int64_t count,
                                      MatrixView out) {
  ForEachElement(count * p.heads, p.iq.cols, [&](int64_t r, int64_t c) {
    const int64_t t = t0 + r / p.heads;
    At(out, r, c) =
        RowOf(p.w, t)[r % p.heads] * At(p.iq, t * p.heads + r % p.heads, c);
  });
}

// From e_ik [count*heads, dim] = e ik (DenseKlRowKernel's e): diq[t,h] +=
// w[t,h] e_ik[t,h] and dw[t,h] += iq[t,h] . e_ik[t,h], one warp per row (a
// fixed butterfly: deterministic). Empty views are skipped.
__global__ void QueryGradsKernel(KlProblem p, int64_t t0, int64_t count,
                                 ConstMatrixView e_ik, MatrixView diq,
                                 MatrixView dw) {
  const int64_t r = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= count * p.heads) return;
  const int64_t t = t0 + r / p.heads;
  const int h = static_cast<int>(r % p.heads);
  const int64_t q_row = t * p.heads + h;
  const float weight = RowOf(p.w, t)[h];
  double dot = 0;
  for (int64_t c = lane; c < p.iq.cols; c += 32) {
    const float g = At(e_ik, r, c);
    if (diq.data != nullptr) At(diq, q_row, c) += weight * g;
    dot += double{At(p.iq, q_row, c)} * g;
  }
  dot = WarpSum(dot);
  if (dw.data != nullptr && lane == 0) {
    RowOf(dw, t)[h] += static_cast<float>(dot);
  }
}

// The gradient products below give each block an output tile of
// kRowLanes*kI rows x kProductCols columns: thread (ty, tx) owns rows
// ty + kRowLanes*i and columns tx + kColLanes*l.
constexpr int kProductThreads = 256;
constexpr int kColLanes = 32;
constexpr int kRowLanes = kProductThreads / kColLanes;
constexpr int kColsPerLane = 4;
constexpr int kProductCols = kColLanes * kColsPerLane;
constexpr int kSlotTile = 32;  // slots per step of the query gradient
constexpr int kKeySlots = 64;  // slots per block of the key-row gradient

// acc[i][l] += sum over k < depth, ascending, of a[k][ty + kRowLanes*i] *
// b[k][tx + kColLanes*l]; a and b in shared memory with row pitches.
template <int kI, int kL>
__device__ void MultiplyStaged(const float* a, int a_pitch, const float* b,
                               int b_pitch, int depth, float (&acc)[kI][kL]) {
  const int tx = threadIdx.x % kColLanes, ty = threadIdx.x / kColLanes;
  for (int k = 0; k < depth; ++k) {
    float x[kI], y[kL];
#pragma unroll
    for (int i = 0; i < kI; ++i) x[i] = a[k * a_pitch + ty + kRowLanes * i];
#pragma unroll
    for (int l = 0; l < kL; ++l) y[l] = b[k * b_pitch + tx + kColLanes * l];
#pragma unroll
    for (int i = 0; i < kI; ++i) {
#pragma unroll
      for (int l = 0; l < kL; ++l) acc[i][l] += x[i] * y[l];
    }
  }
}

// Calls fn(row, column, acc entry) for each of the thread's product entries.
template <int kI, int kL, typename Fn>
__device__ void ForProductEntries(float (&acc)[kI][kL], Fn fn) {
  const int tx = threadIdx.x % kColLanes, ty = threadIdx.x / kColLanes;
#pragma unroll
  for (int i = 0; i < kI; ++i) {
#pragma unroll
    for (int l = 0; l < kL; ++l) {
      fn(ty + kRowLanes * i, tx + kColLanes * l, acc[i][l]);
    }
  }
}

// diq[t,h][c] += sum over slots j, in order, of g[h][j] * ik[keys[t][j]][c]
// for query t = t0 + blockIdx.x and columns c of tile blockIdx.y.
__global__ void QueryGradKernel(KlProblem p, int64_t t0, const float* dot_grad,
                                MatrixView diq) {
  __shared__ float g_tile[kSlotTile][kMaxHeads + 1];
  __shared__ float k_tile[kSlotTile][kProductCols];
  const int64_t t = t0 + blockIdx.x, c0 = blockIdx.y * kProductCols;
  const int width =
      static_cast<int>(std::min<int64_t>(kProductCols, p.ik.cols - c0));
  const int32_t* selected = p.keys + t * p.topk;
  const float* grads = dot_grad + int64_t{blockIdx.x} * p.heads * p.topk;
  float acc[kMaxHeads / kRowLanes][kColsPerLane];
  // Starting from diq keeps the CPU's order of additions.
  ForProductEntries(acc, [&](int h, int c, float& entry) {
    entry =
        h < p.heads && c < width ? RowOf(diq, t * p.heads + h)[c0 + c] : 0.f;
  });
  for (int j0 = 0; j0 < p.topk; j0 += kSlotTile) {
    const int depth = min(kSlotTile, p.topk - j0);
    for (int i = threadIdx.x; i < kSlotTile * kMaxHeads; i += kProductThreads) {
      const int j = i % kSlotTile, h = i / kSlotTile;
      g_tile[j][h] =
          j < depth && h < p.heads ? grads[h * p.topk + j0 + j] : 0.f;
    }
    for (int i = threadIdx.x; i < kSlotTile * kProductCols;
         i += kProductThreads) {
      const int j = i / kProductCols, c = i % kProductCols;
      const int32_t s = j < depth ? selected[j0 + j] : -1;
      k_tile[j][c] = s >= 0 && c < width ? RowOf(p.ik, s)[c0 + c] : 0.f;
    }
    __syncthreads();
    MultiplyStaged(&g_tile[0][0], kMaxHeads + 1, &k_tile[0][0], kProductCols,
                   depth, acc);
    __syncthreads();
  }
  ForProductEntries(acc, [&](int h, int c, float& entry) {
    if (h < p.heads && c < width) RowOf(diq, t * p.heads + h)[c0 + c] = entry;
  });
}

// key_rows[blockIdx.y][j][c] = sum_h g[h][j] * iq[t,h][c]: what slot j of
// query t = t0 + blockIdx.y adds to its key's dik row, for the slots of tile
// blockIdx.x and columns of tile blockIdx.z.
__global__ void KeyRowGradKernel(KlProblem p, int64_t t0, const float* dot_grad,
                                 float* key_rows) {
  __shared__ float g_tile[kMaxHeads][kKeySlots];
  __shared__ float q_tile[kMaxHeads][kProductCols];
  const int64_t t = t0 + blockIdx.y, dim = p.ik.cols;
  const int j0 = blockIdx.x * kKeySlots;
  const int64_t c0 = blockIdx.z * kProductCols;
  const int width = static_cast<int>(std::min<int64_t>(kProductCols, dim - c0));
  const float* grads = dot_grad + int64_t{blockIdx.y} * p.heads * p.topk;
  for (int i = threadIdx.x; i < kMaxHeads * kKeySlots; i += kProductThreads) {
    const int h = i / kKeySlots, j = i % kKeySlots;
    g_tile[h][j] =
        h < p.heads && j0 + j < p.topk ? grads[h * p.topk + j0 + j] : 0.f;
  }
  for (int i = threadIdx.x; i < kMaxHeads * kProductCols;
       i += kProductThreads) {
    const int h = i / kProductCols, c = i % kProductCols;
    q_tile[h][c] =
        h < p.heads && c < width ? RowOf(p.iq, t * p.heads + h)[c0 + c] : 0.f;
  }
  __syncthreads();
  float acc[kKeySlots / kRowLanes][kColsPerLane] = {};
  MultiplyStaged(&g_tile[0][0], kKeySlots, &q_tile[0][0], kProductCols, p.heads,
                 acc);
  float* rows = key_rows + (int64_t{blockIdx.y} * p.topk + j0) * dim + c0;
  ForProductEntries(acc, [&](int j, int c, float& entry) {
    if (j0 + j < p.topk && c < width) rows[j * dim + c] = entry;
  });
}

// Radix-sort bits that cover key tokens + 1, 0..nk (0 marks a -1 slot).
int KeyBits(int64_t nk) {
  int bits = 1;
  while ((int64_t{1} << bits) <= nk) ++bits;
  return bits;
}

// Sort input for a chunk's (query, slot) pairs: key token + 1 and the pair.
__global__ void PairKeysKernel(const int32_t* keys, int items,
                               uint32_t* sort_keys, int32_t* pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= items) return;
  sort_keys[i] = static_cast<uint32_t>(keys[i] + 1);
  pairs[i] = i;
}

// The first index of sorted[0, n) holding a value >= value.
__device__ int LowerBound(const uint32_t* sorted, int n, uint32_t value) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (sorted[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

constexpr int kKeyThreads = 128;

// One block per key token s: dik[s] += the key rows of the chunk's pairs
// that chose s, in ascending (query, slot) order.
__global__ void KeyGradKernel(const uint32_t* sorted_keys, const int32_t* pairs,
                              int items, const float* key_rows,
                              MatrixView dik) {
  const int64_t s = blockIdx.x;
  const uint32_t token = static_cast<uint32_t>(s) + 1;
  const int begin = LowerBound(sorted_keys, items, token);
  const int end = LowerBound(sorted_keys, items, token + 1);
  if (begin == end) return;
  float* out = RowOf(dik, s);
  for (int64_t c = threadIdx.x; c < dik.cols; c += kKeyThreads) {
    float acc = out[c];
    for (int i = begin; i < end; ++i) {
      acc += key_rows[static_cast<int64_t>(pairs[i]) * dik.cols + c];
    }
    out[c] = acc;
  }
}

// *loss = coeff * (sum of the n row losses) / n, summed in a fixed order.
__global__ void LossKernel(const double* row_loss, int64_t n, float coeff,
                           double* loss) {
  double part = 0;
  for (int64_t i = threadIdx.x; i < n; i += kKlThreads) part += row_loss[i];
  const double total = BlockAllReduce(part, SumOp());
  if (threadIdx.x == 0) *loss = coeff * total / static_cast<double>(n);
}

// The bf16 mode's loss where the selection is dense (each query selects at
// least one in 8 of the keys): a block of queries' scores with every key and
// their heads with positive dots by IndexerScores (TF32 tensor-core products
// summed over heads in registers: the dots are never stored), the loss and e
// (DenseKlRowKernel) from the selected keys' entries, then the gradients
// through two bf16 products of e (rounded to bf16 as it is written, as every
// product's output gradient is in this mode): e ik for the query and
// head-weight gradients, e^T (w iq) for the key gradients. The products stay
// TF32, not bf16: the ReLU's kink and the softmax see the fp32 path's values
// to about 1e-3 relative, and the fp32 operands need no conversion pass. In
// self-attention (n == nk: query t is key token t, its keys are <= t) a
// block of queries scores the keys up to its last query only, about half the
// products of every key. Queries from kept_from on (n when none) take their
// scores and positive heads from `kept` (IndexerTopK's, bitwise what
// IndexerScores gives here) instead. Every sum runs in an order fixed by the
// shapes: deterministic.
void DenseKlLoss(CudaContext& ctx, KlProblem p, int64_t n, MatrixView diq,
                 MatrixView dik, MatrixView dw, float coeff,
                 const KeptIndexerScores* kept, int64_t kept_from,
                 double* loss) {
  cudaStream_t stream = ctx.stream();
  const int64_t nk = p.ik.rows, heads = p.heads, dim = p.ik.cols;
  // Rows of bf16 gradients padded to 16 bytes for the products.
  const int64_t grads_ld = (nk + 7) / 8 * 8;
  const int64_t chunk = ChunkQueries(
      n,
      nk * (sizeof(float) + sizeof(uint32_t)) +
          heads * (grads_ld * sizeof(__nv_bfloat16) + 2 * dim * sizeof(float)));
  Carver sizer;
  auto carve = [&](Carver& c) {
    struct {
      double* row_loss;
      float* scores;
      uint32_t* positive;
      __nv_bfloat16* grads;
      float* e_ik;
      float* weighted_iq;
    } b;
    b.row_loss = c.Take<double>(n);
    b.scores = c.Take<float>(chunk * nk);
    b.positive = c.Take<uint32_t>(chunk * nk);
    b.grads = c.Take<__nv_bfloat16>(chunk * heads * grads_ld);
    b.e_ik = c.Take<float>(chunk * heads * dim);
    b.weighted_iq = c.Take<float>(chunk * heads * dim);
    return b;
  };
  carve(sizer);
  // Linear takes the plain scratch: these live in the composite one.
  Carver carver(static_cast<char*>(ctx.CompositeScratch(sizer.used())));
  const auto b = carve(carver);
  // Allowed once for the widest rows; each chunk launches with its own.
  AllowShared(DenseKlRowKernel, DenseKlRowShared(p.topk, nk));
  const int64_t causal_offset = n == nk ? 0 : -1;
  const bool need_e_ik = !diq.empty() || !dw.empty();
  for (int64_t t0 = 0, count = 0; t0 < n; t0 += count) {
    // Chunks end where the kept rows begin.
    count = std::min({chunk, n - t0, t0 < kept_from ? kept_from - t0 : n});
    const int64_t rows = count * heads;
    const int64_t key_end = VisibleKeyEnd(n, nk, t0 + count);
    const ConstMatrixView ik = p.ik.Rows(0, key_end);
    const float* scores = b.scores;
    const uint32_t* positive = b.positive;
    int64_t scores_ld = key_end;
    if (t0 >= kept_from) {
      scores_ld = kept->ld;
      scores = kept->scores() + (t0 - kept->first) * scores_ld;
      positive = kept->positive_heads() + (t0 - kept->first) * scores_ld;
    } else {
      IndexerScores(ctx, p.iq, p.ik, p.w, t0, count, key_end, causal_offset,
                    p.scale, b.scores, b.positive, key_end);
    }
    DenseKlRowKernel<<<count, kKlThreads, DenseKlRowShared(p.topk, key_end),
                       stream>>>(p, t0, static_cast<int>(key_end), scores,
                                 positive, scores_ld, b.grads, grads_ld,
                                 b.row_loss);
    GLM_CUDA_CHECK_LAUNCH();
    const MatrixView e_ik{b.e_ik, rows, dim, dim},
        weighted_iq{b.weighted_iq, rows, dim, dim};
    if (!dik.empty()) {
      WeightedQueriesKernel<<<GridStrideBlocks(rows * dim), kBlockThreads, 0,
                              stream>>>(p, t0, count, weighted_iq);
      GLM_CUDA_CHECK_LAUNCH();
    }
    if (need_e_ik) Zero(ctx, e_ik);
    if (need_e_ik || !dik.empty()) {
      LinearBackwardBf16(ctx, weighted_iq, ik, b.grads, grads_ld,
                         need_e_ik ? e_ik : MatrixView{},
                         RowsOrEmpty(dik, 0, key_end));
    }
    if (need_e_ik) {
      QueryGradsKernel<<<(rows * 32 + kBlockThreads - 1) / kBlockThreads,
                         kBlockThreads, 0, stream>>>(p, t0, count, e_ik, diq,
                                                     dw);
      GLM_CUDA_CHECK_LAUNCH();
    }
  }
  LossKernel<<<1, kKlThreads, 0, stream>>>(b.row_loss, n, coeff, loss);
  GLM_CUDA_CHECK_LAUNCH();
}

// Whether the loss takes the dense path (DenseKlLoss) for these operands:
// the bf16 mode's tensor-core scores where each query selects at least one
// in 8 of the keys (each key's slot then fits an int16 in shared memory:
// nk <= 8 * kMaxTopK).
bool DenseKlApplies(const CudaContext& ctx, ConstMatrixView iq,
                    ConstMatrixView ik, int64_t heads, int64_t topk) {
  return ctx.precision() == Precision::kBf16 && 8 * topk >= ik.rows &&
         IndexerScoresSupported(iq, ik, heads);
}

bool SameView(ConstMatrixView a, ConstMatrixView b) {
  return a.data == b.data && a.rows == b.rows && a.cols == b.cols &&
         a.stride == b.stride;
}

// The first of the n self-attention queries whose scores `kept` (or null)
// holds for p's operands; n where it holds none of them.
int64_t KeptFrom(const KeptIndexerScores* kept, const KlProblem& p, int64_t n) {
  const bool same = kept != nullptr && !kept->empty() && n == p.ik.rows &&
                    SameView(kept->iq, p.iq) && SameView(kept->ik, p.ik) &&
                    SameView(kept->w, p.w);
  return same ? kept->first : n;
}

// Byte offsets of the loss's pieces inside its one scratch buffer.
struct KlPlan {
  int64_t chunk = 0;  // queries per pass
  size_t row_loss = 0;
  size_t dot_grad = 0;     // chunk*heads*topk floats
  size_t key_rows = 0;     // chunk*topk*dim floats
  size_t sort_keys = 0;    // two buffers of chunk*topk uint32
  size_t sort_values = 0;  // two buffers of chunk*topk int32
  size_t temp = 0;
  size_t temp_bytes = 0;
  size_t total = 0;
};

KlPlan PlanKl(int64_t n, int64_t nk, int64_t dim, int64_t topk, int64_t heads,
              bool need_dik) {
  KlPlan plan;
  auto take = [&](size_t bytes) {
    const size_t at = plan.total;
    plan.total += ScratchAlignUp(bytes);
    return at;
  };
  const size_t key_bytes = topk * (dim * sizeof(float) + 16);
  const size_t per_query =
      topk * heads * sizeof(float) + (need_dik ? key_bytes : 0);
  plan.chunk = ChunkQueries(n, per_query);
  const int64_t items = plan.chunk * topk;
  assert(items <= INT_MAX);
  plan.row_loss = take(n * sizeof(double));
  plan.dot_grad = take(items * heads * sizeof(float));
  if (!need_dik) return plan;
  plan.key_rows = take(items * dim * sizeof(float));
  plan.sort_keys = take(2 * items * sizeof(uint32_t));
  plan.sort_values = take(2 * items * sizeof(int32_t));
  cub::DoubleBuffer<uint32_t> sort_keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> sort_values(nullptr, nullptr);
  GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, plan.temp_bytes, sort_keys, sort_values, static_cast<int>(items),
      0, KeyBits(nk)));
  plan.temp = take(plan.temp_bytes);
  return plan;
}

// dik += the gradients of queries [t0, t0 + count): their key rows, summed
// per key through the transpose of their key lists (a stable radix sort
// keeps each key's pairs ascending).
void AccumulateKeyGrads(CudaContext& ctx, const KlProblem& p, int64_t t0,
                        int64_t count, const KlPlan& plan, char* scratch,
                        MatrixView dik) {
  cudaStream_t stream = ctx.stream();
  const int64_t dim = p.ik.cols;
  const auto* dot_grad =
      reinterpret_cast<const float*>(scratch + plan.dot_grad);
  auto* key_rows = reinterpret_cast<float*>(scratch + plan.key_rows);
  const dim3 grid((p.topk + kKeySlots - 1) / kKeySlots, count,
                  (dim + kProductCols - 1) / kProductCols);
  KeyRowGradKernel<<<grid, kProductThreads, 0, stream>>>(p, t0, dot_grad,
                                                         key_rows);
  GLM_CUDA_CHECK_LAUNCH();
  const int items = static_cast<int>(count * p.topk);
  const int64_t plan_items = plan.chunk * p.topk;
  auto* sort_keys = reinterpret_cast<uint32_t*>(scratch + plan.sort_keys);
  auto* sort_values = reinterpret_cast<int32_t*>(scratch + plan.sort_values);
  PairKeysKernel<<<(items + kKlThreads - 1) / kKlThreads, kKlThreads, 0,
                   stream>>>(p.keys + t0 * p.topk, items, sort_keys,
                             sort_values);
  GLM_CUDA_CHECK_LAUNCH();
  cub::DoubleBuffer<uint32_t> keys(sort_keys, sort_keys + plan_items);
  cub::DoubleBuffer<int32_t> pairs(sort_values, sort_values + plan_items);
  size_t temp_bytes = plan.temp_bytes;
  GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      scratch + plan.temp, temp_bytes, keys, pairs, items, 0,
      KeyBits(p.ik.rows), stream));
  KeyGradKernel<<<p.ik.rows, kKeyThreads, 0, stream>>>(
      keys.Current(), pairs.Current(), items, key_rows, dik);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void IndexerTopK(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                 ConstMatrixView w, const int32_t* seq_start,
                 int64_t query_offset, int64_t topk, float scale, int32_t* keys,
                 KeptIndexerScores* keep) {
  const int64_t nq = w.rows, nk = ik.rows, heads = w.cols;
  assert(iq.rows == nq * heads && iq.cols == ik.cols);
  assert(query_offset >= 0 && query_offset + nq <= nk && nk <= INT_MAX);
  assert(topk > 0 && topk <= kMaxTopK);
  if (keep != nullptr) *keep = KeptIndexerScores();
  if (nq == 0) return;
  // The bf16 mode scores on the tensor cores (IndexerScores) where the
  // shapes allow, and lists each query's keys in key order.
  const bool approximate = ctx.precision() == Precision::kBf16;
  const bool tensor_cores =
      approximate && IndexerScoresSupported(iq, ik, heads);
  // Scores span the keys any of these queries can see.
  const int64_t ld = query_offset + nq;
  const int sort_size = PowerOfTwoAtLeast(topk);
  cudaStream_t stream = ctx.stream();
  // The bf16 mode lists each query's keys in key order (no sort), and does
  // not score queries whose token is among the first topk (each sees at most
  // topk keys, so selects them all): at 4k tokens with top-2048 that is half
  // the selections and a quarter of the products.
  const int64_t all_visible =
      approximate ? std::clamp<int64_t>(topk - query_offset, 0, nq) : 0;
  // Scores the loss would compute again are scored once, all queries at a
  // time, into the kept buffer; otherwise a chunk at a time into scratch.
  const int64_t scored = nq - all_visible;
  const size_t kept_bytes = KeptIndexerScores::Bytes(scored, ld);
  const bool keeping = keep != nullptr && tensor_cores && nq == nk &&
                       scored > 0 && scored <= kMaxChunk &&
                       kept_bytes <= kKeptScoresBytes &&
                       DenseKlApplies(ctx, iq, ik, heads, topk);
  int64_t chunk = scored;
  float* scores = nullptr;
  uint32_t* positive = nullptr;
  if (keeping) {
    *keep = {iq,          ik, w,
             all_visible, ld, DeviceBuffer(ctx.allocator(), kept_bytes)};
    scores = keep->scores();
    positive = keep->positive_heads();
  } else {
    chunk = ChunkQueries(nq, ld * sizeof(float));
    scores = static_cast<float*>(ctx.Scratch(chunk * ld * sizeof(float)));
  }
  if (all_visible > 0) {
    AllVisibleKeysKernel<<<all_visible, kBlockThreads, 0, stream>>>(
        seq_start, query_offset, static_cast<int>(topk), keys);
    GLM_CUDA_CHECK_LAUNCH();
  }
  for (int64_t t0 = all_visible; t0 < nq; t0 += chunk) {
    const int64_t t1 = std::min(nq, t0 + chunk);
    if (tensor_cores) {
      IndexerScores(ctx, iq, ik, w, t0, t1 - t0, query_offset + t1,
                    query_offset, scale, scores, positive, ld);
    } else {
      const dim3 grid((query_offset + t1 + kTileB - 1) / kTileB,
                      (t1 - t0 + kTileA - 1) / kTileA);
      ScoreKernel<<<grid, kTileThreads, 0, stream>>>(
          iq, ik, w, seq_start, query_offset, t0, t1, scale, scores, ld);
      GLM_CUDA_CHECK_LAUNCH();
    }
    if (approximate) {
      SelectInKeyOrderKernel<<<t1 - t0, kSelectThreads, 0, stream>>>(
          scores, ld, seq_start, query_offset, t0, static_cast<int>(topk),
          keys);
    } else {
      SelectKernel<<<t1 - t0, kSelectThreads, sort_size * sizeof(uint64_t),
                     stream>>>(scores, ld, seq_start, query_offset, t0,
                               static_cast<int>(topk), sort_size, keys);
    }
    GLM_CUDA_CHECK_LAUNCH();
  }
}

size_t IndexerKlLossScratchBytes(int64_t n, int64_t nk, int64_t dim,
                                 int64_t topk, int64_t heads, bool need_dik) {
  return PlanKl(n, nk, dim, topk, heads, need_dik).total;
}

void IndexerKlLoss(CudaContext& ctx, ConstMatrixView iq, ConstMatrixView ik,
                   ConstMatrixView w, const int32_t* keys, int64_t topk,
                   float scale, ConstMatrixView target, float coeff,
                   MatrixView diq, MatrixView dik, MatrixView dw,
                   const KeptIndexerScores* kept, bool allow_sparse,
                   double* loss) {
  const int64_t n = w.rows, heads = w.cols, dim = ik.cols;
  assert(iq.rows == n * heads && iq.cols == dim);
  assert(heads > 0 && heads <= kMaxHeads && topk > 0 && topk <= kMaxTopK);
  assert(target.rows == n && target.cols == topk);
  assert(diq.empty() || (diq.rows == iq.rows && diq.cols == dim));
  assert(dik.empty() || (dik.rows == ik.rows && dik.cols == dim));
  assert(dw.empty() || (dw.rows == n && dw.cols == heads));
  assert(ik.rows < INT_MAX);
  const KlProblem p{iq,
                    ik,
                    w,
                    target,
                    keys,
                    static_cast<int>(topk),
                    static_cast<int>(heads),
                    scale,
                    coeff / static_cast<float>(n)};
  if (DenseKlApplies(ctx, iq, ik, heads, topk)) {
    DenseKlLoss(ctx, p, n, diq, dik, dw, coeff, kept, KeptFrom(kept, p, n),
                loss);
    return;
  }
  cudaStream_t stream = ctx.stream();
  if (ctx.precision() == Precision::kBf16 && allow_sparse &&
      SparseIndexerLossSupported(iq, ik, dik, heads, topk)) {
    auto* row_loss = static_cast<double*>(ctx.Scratch(n * sizeof(double)));
    SparseIndexerLoss(ctx, p, n, diq, dik, dw, row_loss);
    LossKernel<<<1, kKlThreads, 0, stream>>>(row_loss, n, coeff, loss);
    GLM_CUDA_CHECK_LAUNCH();
    return;
  }
  const KlPlan plan = PlanKl(n, ik.rows, dim, topk, heads, !dik.empty());
  auto* scratch = static_cast<char*>(ctx.Scratch(plan.total));
  auto* row_loss = reinterpret_cast<double*>(scratch + plan.row_loss);
  auto* dot_grad = reinterpret_cast<float*>(scratch + plan.dot_grad);
  const size_t row_shared = topk * 2 * sizeof(float);
  AllowShared(KlRowKernel, row_shared);
  const int64_t col_tiles = (dim + kProductCols - 1) / kProductCols;
  for (int64_t t0 = 0; t0 < n; t0 += plan.chunk) {
    const int64_t count = std::min(plan.chunk, n - t0);
    DotsKernel<<<dim3((topk + kTileB - 1) / kTileB, count), kTileThreads, 0,
                 stream>>>(p, t0, dot_grad);
    GLM_CUDA_CHECK_LAUNCH();
    KlRowKernel<<<count, kKlThreads, row_shared, stream>>>(p, t0, dot_grad,
                                                           row_loss, dw);
    GLM_CUDA_CHECK_LAUNCH();
    if (!diq.empty()) {
      QueryGradKernel<<<dim3(count, col_tiles), kProductThreads, 0, stream>>>(
          p, t0, dot_grad, diq);
      GLM_CUDA_CHECK_LAUNCH();
    }
    if (!dik.empty()) {
      AccumulateKeyGrads(ctx, p, t0, count, plan, scratch, dik);
    }
  }
  LossKernel<<<1, kKlThreads, 0, stream>>>(row_loss, n, coeff, loss);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
