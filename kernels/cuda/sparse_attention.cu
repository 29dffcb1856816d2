#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <vector>

#include "kernels/cuda/attention_key_sums.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/sparse_attention.cuh"

namespace glm::cuda {
namespace {

constexpr int kThreads = kBlockThreads;
constexpr int kWarps = kThreads / 32;
constexpr size_t kMaxSharedBytes = 48 * 1024;

template <typename View>
__device__ auto* RowOf(const View& m, int64_t r) {
  return &At(m, r, 0);
}

// Row `h` of key token `token` in a [tokens*heads, dim] matrix; nullptr for a
// -1 slot.
__device__ const float* HeadRow(const ConstMatrixView& m, int32_t token,
                                int64_t heads, int64_t h) {
  return token < 0 ? nullptr : RowOf(m, token * heads + h);
}

// Maximum of `value` over the block; every thread gets it.
__device__ float BlockMax(float value) {
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float result;
  const float block_max = Reduce(storage).Reduce(
      value, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) result = block_max;
  __syncthreads();
  const float broadcast = result;
  __syncthreads();  // a following call reuses storage and result
  return broadcast;
}

// One warp per entry e < n: emit(e, x . row_of(e)) on lane 0, skipping entries
// whose row is nullptr. x has `cols` floats (in shared memory).
template <typename RowFn, typename EmitFn>
__device__ void WarpDots(int n, const float* x, int64_t cols, RowFn row_of,
                         EmitFn emit) {
  const int lane = threadIdx.x % 32;
  for (int e = threadIdx.x / 32; e < n; e += kWarps) {
    const float* row = row_of(e);
    if (row == nullptr) continue;  // uniform across the warp
    float acc = 0.f;
    for (int64_t c = lane; c < cols; c += 32) acc += x[c] * row[c];
    acc = WarpSum(acc);
    if (lane == 0) emit(e, acc);
  }
}

// A gathered row and its weight; row == nullptr marks an entry to skip.
struct WeightedRow {
  float weight;
  const float* row;
};

// emit(c, sum over e < n of entry(e).weight * entry(e).row[c]) for every column
// c < cols. Narrow rows split the entries over several thread groups whose
// partial sums are added in group order, so the result is deterministic.
template <typename EntryFn, typename EmitFn>
__device__ void GatherWeightedSum(int n, int64_t cols, EntryFn entry,
                                  EmitFn emit) {
  __shared__ float partial[kThreads];
  for (int64_t c0 = 0; c0 < cols; c0 += kThreads) {
    const int width =
        static_cast<int>(cols - c0 < kThreads ? cols - c0 : kThreads);
    const int groups = kThreads / width;
    const int c = threadIdx.x % width, group = threadIdx.x / width;
    float acc = 0.f;
    if (group < groups) {
      for (int e = group; e < n; e += groups) {
        const WeightedRow w = entry(e);
        if (w.row != nullptr) acc += w.weight * w.row[c0 + c];
      }
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < width) {
      float sum = 0.f;
      for (int g = 0; g < groups; ++g) sum += partial[g * width + threadIdx.x];
      emit(c0 + threadIdx.x, sum);
    }
    __syncthreads();
  }
}

// Copies n floats or ints from global to shared memory.
template <typename T>
__device__ void LoadShared(const T* from, int64_t n, T* to) {
  for (int64_t i = threadIdx.x; i < n; i += kThreads) to[i] = from[i];
}

// log(sum of exp(score - max)) + max; -inf for a row without keys.
__device__ float RowLse(float row_max, double total) {
  return total > 0 ? row_max + static_cast<float>(log(total)) : -INFINITY;
}

// One block per query row (token t, head h). Shared: score[topk], query[dqk],
// selected[topk]. Softmax as the CPU: fp32 exponentials, double normalizer.
// Writes whichever of out, probs and lse it is given (empty / null: skipped).
__global__ void ForwardKernel(ConstMatrixView q, ConstMatrixView k,
                              ConstMatrixView v, const int32_t* keys, int topk,
                              int heads, float scale, MatrixView out,
                              MatrixView probs, float* lse) {
  extern __shared__ float shared[];
  float* score = shared;
  float* query = score + topk;
  int32_t* selected = reinterpret_cast<int32_t*>(query + q.cols);
  const int64_t row = blockIdx.x;
  const int h = row % heads;
  LoadShared(keys + row / heads * topk, topk, selected);
  LoadShared(RowOf(q, row), q.cols, query);
  __syncthreads();

  WarpDots(
      topk, query, q.cols,
      [&](int j) { return HeadRow(k, selected[j], heads, h); },
      [&](int j, float dot) { score[j] = scale * dot; });
  __syncthreads();
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (selected[j] >= 0) local_max = fmaxf(local_max, score[j]);
  }
  const float row_max = BlockMax(local_max);
  double local_sum = 0;
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (selected[j] < 0) continue;
    score[j] = expf(score[j] - row_max);
    local_sum += score[j];
  }
  const double total = BlockSum(local_sum);
  if (lse != nullptr && threadIdx.x == 0) lse[row] = RowLse(row_max, total);
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    score[j] = selected[j] < 0 ? 0.f : static_cast<float>(score[j] / total);
    if (probs.data != nullptr) RowOf(probs, row)[j] = score[j];
  }
  __syncthreads();

  if (out.data == nullptr) return;
  float* o = RowOf(out, row);
  GatherWeightedSum(
      topk, v.cols,
      [&](int j) {
        return WeightedRow{score[j], HeadRow(v, selected[j], heads, h)};
      },
      [&](int64_t c, float value) { o[c] = value; });
}

// One block per query row: ds_j = p_j * (dout . v_j - sum_i p_i dout . v_i) *
// scale, saved to ds (when not null) for the key pass; dq += sum_j ds_j k_j.
// Shared: grad[topk], dout row[dv], selected[topk].
__global__ void QueryGradKernel(ConstMatrixView k, ConstMatrixView v,
                                const int32_t* keys, int topk, int heads,
                                float scale, ConstMatrixView probs,
                                ConstMatrixView dout, MatrixView dq,
                                float* ds) {
  extern __shared__ float shared[];
  float* grad = shared;
  float* out_grad = grad + topk;
  int32_t* selected = reinterpret_cast<int32_t*>(out_grad + v.cols);
  const int64_t row = blockIdx.x;
  const int h = row % heads;
  LoadShared(keys + row / heads * topk, topk, selected);
  LoadShared(RowOf(dout, row), v.cols, out_grad);
  __syncthreads();

  WarpDots(
      topk, out_grad, v.cols,
      [&](int j) { return HeadRow(v, selected[j], heads, h); },
      [&](int j, float dot) { grad[j] = dot; });
  __syncthreads();
  const float* p = RowOf(probs, row);
  double local = 0;
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (selected[j] >= 0) local += double{p[j]} * grad[j];
  }
  const float weighted = static_cast<float>(BlockSum(local));
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (selected[j] < 0) continue;
    grad[j] = p[j] * (grad[j] - weighted) * scale;
    if (ds != nullptr) ds[row * topk + j] = grad[j];
  }
  __syncthreads();

  if (dq.data == nullptr) return;
  float* g = RowOf(dq, row);
  GatherWeightedSum(
      topk, k.cols,
      [&](int j) {
        return WeightedRow{grad[j], HeadRow(k, selected[j], heads, h)};
      },
      [&](int64_t c, float value) { g[c] += value; });
}

// Sort keys and values for the key -> (query, slot) transpose: item i = t*topk
// + j has key keys[i] (nk for a -1 slot, so it sorts last) and value i; counts
// the valid items per key token.
__global__ void TransposeInputKernel(const int32_t* keys, int64_t items,
                                     int32_t nk, uint32_t* sort_keys,
                                     int32_t* sort_values, int32_t* counts) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= items) return;
  const int32_t key = keys[i];
  sort_keys[i] = key < 0 ? nk : key;
  sort_values[i] = static_cast<int32_t>(i);
  if (key >= 0) atomicAdd(&counts[key], 1);  // order-independent count
}

// One block per key row (token s, head h): dk += sum ds * q and dv += sum p *
// dout over the (query, slot) pairs that selected s, in ascending order.
__global__ void KeyGradKernel(ConstMatrixView q, ConstMatrixView probs,
                              ConstMatrixView dout, const float* ds,
                              const int32_t* offsets, const int32_t* pairs,
                              int topk, int heads, MatrixView dk,
                              MatrixView dv) {
  const int64_t key_row = blockIdx.x;
  const int64_t token = key_row / heads;
  const int h = key_row % heads;
  const int begin = offsets[token];
  const int n = offsets[token + 1] - begin;
  if (n == 0) return;  // uniform across the block
  const int32_t* list = pairs + begin;
  // Query row and slot of the e-th pair.
  auto query_row = [&](int e) { return list[e] / topk * int64_t{heads} + h; };
  auto slot = [&](int e) { return list[e] % topk; };
  if (dk.data != nullptr) {
    float* g = RowOf(dk, key_row);
    GatherWeightedSum(
        n, dk.cols,
        [&](int e) {
          const int64_t row = query_row(e);
          return WeightedRow{ds[row * topk + slot(e)], RowOf(q, row)};
        },
        [&](int64_t c, float value) { g[c] += value; });
  }
  if (dv.data != nullptr) {
    float* g = RowOf(dv, key_row);
    GatherWeightedSum(
        n, dv.cols,
        [&](int e) {
          const int64_t row = query_row(e);
          return WeightedRow{RowOf(probs, row)[slot(e)], RowOf(dout, row)};
        },
        [&](int64_t c, float value) { g[c] += value; });
  }
}

// ---- Tiled kernels (kernels/cuda/attention_tiles.cuh) ----

using tiles::AccumulateTile;
using tiles::kChunk;
using tiles::kPitch;
using tiles::kScorePitch;
using tiles::kTileCols;
using tiles::kTileRows;
using tiles::kTileThreads;
using tiles::NextTile;
using tiles::RowLists;
using tiles::ScoreTile;
using tiles::StartWalk;
using tiles::Walk;
static_assert(kTileThreads == kThreads, "one block size for every kernel");

// A tiled kernel's shared memory: the walk, two staging tiles, one score
// tile, per-row statistics, then its accumulators.
struct TileShared {
  Walk* walk;
  float* rows_stage;
  float* cols_stage;
  float* scores;
  double* row_sums;
  float* row_max;
  float* acc;
};

constexpr size_t kWalkBytes = (sizeof(Walk) + 15) / 16 * 16;
constexpr size_t kStageFloats = kTileRows * kPitch;
constexpr size_t kTileFixedBytes = kWalkBytes +
                                   3 * kStageFloats * sizeof(float) +
                                   kTileRows * (sizeof(double) + sizeof(float));

size_t TileSharedBytes(int64_t acc_floats) {
  return kTileFixedBytes + acc_floats * sizeof(float);
}

__device__ TileShared CarveShared(char* base) {
  TileShared sh;
  sh.walk = reinterpret_cast<Walk*>(base);
  float* stages = reinterpret_cast<float*>(base + kWalkBytes);
  sh.rows_stage = stages;
  sh.cols_stage = stages + kStageFloats;
  sh.scores = stages + 2 * kStageFloats;
  sh.row_sums = reinterpret_cast<double*>(stages + 3 * kStageFloats);
  sh.row_max = reinterpret_cast<float*>(sh.row_sums + kTileRows);
  sh.acc = sh.row_max + kTileRows;
  return sh;
}

// Feature row of token `token` (head h) in a [tokens*heads, dim] matrix, or
// nullptr past the last token.
__device__ const float* TokenRow(const ConstMatrixView& m, int64_t token,
                                 int64_t tokens, int heads, int h) {
  return token < tokens ? RowOf(m, token * heads + h) : nullptr;
}

// Block (query tile, head): two walks over the selected key tiles, the first
// for each row's maximum score, the second for the exponentials (written to
// their probs slots), their double sums and the weighted sum of values; then
// normalizes both. Same arithmetic as ForwardKernel up to summation order,
// and like it writes whichever of out, probs and lse it is given.
__global__ void TiledForwardKernel(ConstMatrixView q, ConstMatrixView k,
                                   ConstMatrixView v, RowLists lists,
                                   int64_t nq, int64_t nk, int topk, int heads,
                                   float scale, MatrixView out,
                                   MatrixView probs, float* lse) {
  extern __shared__ __align__(16) char shared_bytes[];
  const TileShared sh = CarveShared(shared_bytes);
  Walk& walk = *sh.walk;
  const int64_t first = int64_t{blockIdx.x} * kTileRows;
  const int h = blockIdx.y;
  uint32_t tile = 0;
  auto query = [&](int a) { return TokenRow(q, first + a, nq, heads, h); };
  auto key = [&](int a) { return TokenRow(k, tile + a, nk, heads, h); };
  auto value = [&](int a) { return TokenRow(v, tile + a, nk, heads, h); };
  for (int e = threadIdx.x; e < kTileRows * v.cols; e += kThreads) {
    sh.acc[e] = 0.f;
  }
  if (threadIdx.x < kTileRows) {
    sh.row_max[threadIdx.x] = -INFINITY;
    sh.row_sums[threadIdx.x] = 0;
  }
  const bool keep_probs = probs.data != nullptr;
  for (int a = 0; keep_probs && a < kTileRows && first + a < nq; ++a) {
    float* p = RowOf(probs, (first + a) * heads + h);
    for (int j = threadIdx.x; j < topk; j += kThreads) p[j] = 0.f;
  }
  StartWalk(lists, first, nq, walk);
  while (NextTile(lists, walk, &tile)) {
    ScoreTile(query, key, q.cols, sh.rows_stage, sh.cols_stage, sh.scores);
    if (threadIdx.x < kTileRows) {
      const int i = threadIdx.x;
      float row_max = sh.row_max[i];
      for (int j = 0; j < kTileCols; ++j) {
        if (walk.map[i * kTileCols + j] >= 0) {
          row_max = fmaxf(row_max, scale * sh.scores[i * kScorePitch + j]);
        }
      }
      sh.row_max[i] = row_max;
    }
    __syncthreads();
  }
  StartWalk(lists, first, nq, walk);
  while (NextTile(lists, walk, &tile)) {
    ScoreTile(query, key, q.cols, sh.rows_stage, sh.cols_stage, sh.scores);
    if (threadIdx.x < kTileRows) {
      const int i = threadIdx.x;
      float* p = keep_probs && first + i < nq
                     ? RowOf(probs, (first + i) * heads + h)
                     : nullptr;
      double sum = sh.row_sums[i];
      for (int j = 0; j < kTileCols; ++j) {
        const int32_t slot = walk.map[i * kTileCols + j];
        float e = 0.f;
        if (slot >= 0) {
          e = expf(scale * sh.scores[i * kScorePitch + j] - sh.row_max[i]);
          sum += e;
          if (p != nullptr) p[slot] = e;
        }
        sh.scores[i * kScorePitch + j] = e;
      }
      sh.row_sums[i] = sum;
    }
    __syncthreads();
    AccumulateTile(sh.scores, value, v.cols, sh.cols_stage, sh.acc);
  }
  for (int a = 0; a < kTileRows && first + a < nq; ++a) {
    const double total = sh.row_sums[a];
    const int64_t row = (first + a) * heads + h;
    if (lse != nullptr && threadIdx.x == 0) {
      lse[row] = RowLse(sh.row_max[a], total);
    }
    if (out.data != nullptr) {
      float* o = RowOf(out, row);
      for (int c = threadIdx.x; c < v.cols; c += kThreads) {
        o[c] = total > 0 ? static_cast<float>(sh.acc[a * v.cols + c] / total)
                         : 0.f;
      }
    }
    if (total == 0 || !keep_probs) continue;
    float* p = RowOf(probs, row);
    for (int j = threadIdx.x; j < topk; j += kThreads) {
      p[j] = static_cast<float>(p[j] / total);
    }
  }
}

// weights[t, j] = sum over heads h (in order) of probs[t*heads + h, j].
__global__ void HeadSumKernel(ConstMatrixView probs, int heads,
                              MatrixView weights) {
  ForEachElement(weights.rows, weights.cols, [&](int64_t t, int64_t j) {
    float sum = 0.f;
    for (int h = 0; h < heads; ++h) sum += At(probs, t * heads + h, j);
    At(weights, t, j) = sum;
  });
}

// Block t: weights[t, j] = sum over heads h, in order, of exp(scale *
// scores_h[t, keys[t, j]] - lse[t*heads + h]), each head's score row read
// through shared memory. scores holds the heads' [rows, nk] blocks one
// after another (nk: the keys scored, past every selected one).
__global__ void HeadWeightsKernel(const float* scores, int64_t rows, int64_t nk,
                                  const int32_t* keys, const float* lse,
                                  int heads, float scale, MatrixView weights) {
  extern __shared__ float row[];
  float* sum = row + nk;  // [topk]: each thread keeps its own slots
  const int64_t t = blockIdx.x, topk = weights.cols;
  const int32_t* selected = keys + t * topk;
  for (int h = 0; h < heads; ++h) {
    LoadRow(scores + (h * rows + t) * nk, nk, row);
    const float row_lse = lse[t * heads + h];
    for (int64_t j = threadIdx.x; j < topk; j += blockDim.x) {
      const int32_t key = selected[j];
      const float p = key < 0 ? 0.f : expf(scale * row[key] - row_lse);
      sum[j] = h == 0 ? p : sum[j] + p;
    }
    __syncthreads();  // the next head's row overwrites this one
  }
  for (int64_t j = threadIdx.x; j < topk; j += blockDim.x) {
    At(weights, t, j) = sum[j];
  }
}

// weights[t, j] = sums[t * ld + keys[t, j]] (0 on -1 slots).
__global__ void GatherKeySumsKernel(const float* sums, int64_t ld,
                                    const int32_t* keys, MatrixView weights) {
  ForEachElement(weights.rows, weights.cols, [&](int64_t t, int64_t j) {
    const int32_t key = keys[t * weights.cols + j];
    At(weights, t, j) = key < 0 ? 0.f : sums[t * ld + key];
  });
}

// Block (query tile, head): the first walk sums p * (dout . v) per row (in
// double, as QueryGradKernel), the second forms ds = p * (dout . v - that) *
// scale, saves it to ds (when not null) and accumulates dq += ds k.
__global__ void TiledQueryGradKernel(ConstMatrixView k, ConstMatrixView v,
                                     RowLists lists, int64_t nq, int64_t nk,
                                     int topk, int heads, float scale,
                                     ConstMatrixView probs,
                                     ConstMatrixView dout, MatrixView dq,
                                     float* ds) {
  extern __shared__ __align__(16) char shared_bytes[];
  const TileShared sh = CarveShared(shared_bytes);
  Walk& walk = *sh.walk;
  const int64_t first = int64_t{blockIdx.x} * kTileRows;
  const int h = blockIdx.y;
  uint32_t tile = 0;
  auto out_grad = [&](int a) {
    return TokenRow(dout, first + a, nq, heads, h);
  };
  auto key = [&](int a) { return TokenRow(k, tile + a, nk, heads, h); };
  auto value = [&](int a) { return TokenRow(v, tile + a, nk, heads, h); };
  auto probs_row = [&](int i) {
    return first + i < nq ? RowOf(probs, (first + i) * heads + h) : nullptr;
  };
  if (dq.data != nullptr) {
    for (int e = threadIdx.x; e < kTileRows * k.cols; e += kThreads) {
      sh.acc[e] = 0.f;
    }
  }
  if (threadIdx.x < kTileRows) sh.row_sums[threadIdx.x] = 0;
  StartWalk(lists, first, nq, walk);
  while (NextTile(lists, walk, &tile)) {
    ScoreTile(out_grad, value, v.cols, sh.rows_stage, sh.cols_stage, sh.scores);
    if (threadIdx.x < kTileRows) {
      const int i = threadIdx.x;
      const float* p = probs_row(i);
      double sum = sh.row_sums[i];
      for (int j = 0; j < kTileCols; ++j) {
        const int32_t slot = walk.map[i * kTileCols + j];
        if (slot >= 0) sum += double{p[slot]} * sh.scores[i * kScorePitch + j];
      }
      sh.row_sums[i] = sum;
    }
    __syncthreads();
  }
  StartWalk(lists, first, nq, walk);
  while (NextTile(lists, walk, &tile)) {
    ScoreTile(out_grad, value, v.cols, sh.rows_stage, sh.cols_stage, sh.scores);
    if (threadIdx.x < kTileRows) {
      const int i = threadIdx.x;
      const float* p = probs_row(i);
      const float weighted = static_cast<float>(sh.row_sums[i]);
      for (int j = 0; j < kTileCols; ++j) {
        const int32_t slot = walk.map[i * kTileCols + j];
        float grad = 0.f;
        if (slot >= 0) {
          grad = p[slot] * (sh.scores[i * kScorePitch + j] - weighted) * scale;
          if (ds != nullptr) ds[((first + i) * heads + h) * topk + slot] = grad;
        }
        sh.scores[i * kScorePitch + j] = grad;
      }
    }
    __syncthreads();
    if (dq.data != nullptr) {
      AccumulateTile(sh.scores, key, k.cols, sh.cols_stage, sh.acc);
    }
  }
  if (dq.data == nullptr) return;
  for (int a = 0; a < kTileRows && first + a < nq; ++a) {
    float* g = RowOf(dq, (first + a) * heads + h);
    for (int c = threadIdx.x; c < dq.cols; c += kThreads) {
      g[c] += sh.acc[a * dq.cols + c];
    }
  }
}

// Block (key tile, head), walking the query tiles that selected its keys in
// ascending order: dv += p dout and dk += ds q. lists: per key token, the
// query tokens that chose it with their slots.
__global__ void TiledKeyGradKernel(ConstMatrixView q, ConstMatrixView probs,
                                   ConstMatrixView dout, const float* ds,
                                   RowLists lists, int64_t nq, int64_t nk,
                                   int topk, int heads, MatrixView dk,
                                   MatrixView dv) {
  extern __shared__ __align__(16) char shared_bytes[];
  const TileShared sh = CarveShared(shared_bytes);
  Walk& walk = *sh.walk;
  const int64_t first = int64_t{blockIdx.x} * kTileRows;
  const int h = blockIdx.y;
  float* dk_acc = sh.acc;
  float* dv_acc = sh.acc + (dk.data != nullptr ? kTileRows * dk.cols : 0);
  const int64_t acc_floats = kTileRows * ((dk.data != nullptr ? dk.cols : 0) +
                                          (dv.data != nullptr ? dv.cols : 0));
  for (int64_t e = threadIdx.x; e < acc_floats; e += kThreads) sh.acc[e] = 0.f;
  uint32_t tile = 0;
  auto query = [&](int a) { return TokenRow(q, tile + a, nq, heads, h); };
  auto out_grad = [&](int a) { return TokenRow(dout, tile + a, nq, heads, h); };
  // weights[i][j] = value(query row of column j, slot) where selected, else 0.
  auto weights_from = [&](auto value) {
    for (int e = threadIdx.x; e < kTileRows * kTileCols; e += kThreads) {
      const int i = e / kTileCols, j = e % kTileCols;
      const int32_t slot = walk.map[e];
      sh.scores[i * kScorePitch + j] =
          slot >= 0 ? value((int64_t{tile} + j) * heads + h, slot) : 0.f;
    }
    __syncthreads();
  };
  StartWalk(lists, first, nk, walk);
  while (NextTile(lists, walk, &tile)) {
    if (dv.data != nullptr) {
      weights_from(
          [&](int64_t row, int32_t slot) { return RowOf(probs, row)[slot]; });
      AccumulateTile(sh.scores, out_grad, dv.cols, sh.cols_stage, dv_acc);
    }
    if (dk.data != nullptr) {
      weights_from(
          [&](int64_t row, int32_t slot) { return ds[row * topk + slot]; });
      AccumulateTile(sh.scores, query, dk.cols, sh.cols_stage, dk_acc);
    }
  }
  for (int a = 0; a < kTileRows && first + a < nk; ++a) {
    const int64_t row = (first + a) * heads + h;
    if (dk.data != nullptr) {
      for (int c = threadIdx.x; c < dk.cols; c += kThreads) {
        RowOf(dk, row)[c] += dk_acc[a * dk.cols + c];
      }
    }
    if (dv.data != nullptr) {
      for (int c = threadIdx.x; c < dv.cols; c += kThreads) {
        RowOf(dv, row)[c] += dv_acc[a * dv.cols + c];
      }
    }
  }
}

// Segmented-sort inputs for the per-query lists: slot ids 0..topk-1 per
// query and the segment offsets t*topk, t <= nq.
__global__ void QueryListInputKernel(int64_t nq, int topk, int32_t* slots,
                                     int32_t* offsets) {
  const int64_t items = nq * topk;
  const int64_t count = items > nq + 1 ? items : nq + 1;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    if (i < items) slots[i] = static_cast<int32_t>(i % topk);
    if (i <= nq) offsets[i] = static_cast<int32_t>(i * topk);
  }
}

// The per-key lists from the transpose's sorted pairs t*topk + j: column t,
// payload j.
__global__ void KeyListKernel(const int32_t* pairs, int64_t items, int topk,
                              uint32_t* columns, int32_t* payloads) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * kThreads) {
    columns[i] = static_cast<uint32_t>(pairs[i] / topk);
    payloads[i] = pairs[i] % topk;
  }
}

// ---- Scratch and dispatch ----

// Radix-sort bits that cover key tokens 0..nk (nk marks a -1 slot).
int KeyBits(int64_t nk) {
  int bits = 1;
  while ((int64_t{1} << bits) <= nk) ++bits;
  return bits;
}

// What a call needs in scratch.
struct ScratchNeeds {
  bool probs = false;        // probabilities recomputed for the backward
  bool ds = false;           // score gradients for the key pass
  bool transpose = false;    // key -> (query, slot) pairs
  bool query_lists = false;  // per-query keys sorted (tiled kernels)
  bool key_lists = false;    // per-key queries as columns (tiled key pass)
};

// Byte offsets of a call's pieces inside its one scratch buffer.
struct ScratchPlan {
  size_t probs = 0;
  size_t ds = 0;
  size_t offsets = 0;
  size_t sort_keys = 0;    // two buffers of nq*topk uint32
  size_t sort_values = 0;  // two buffers of nq*topk int32
  size_t query_columns = 0, query_slots = 0, slot_ids = 0, segments = 0;
  size_t key_columns = 0, key_payloads = 0;
  size_t temp = 0;
  size_t temp_bytes = 0;
  size_t total = 0;
};

ScratchPlan PlanScratch(int64_t nq, int64_t nk, int64_t topk, int64_t heads,
                        const ScratchNeeds& needs) {
  ScratchPlan plan;
  auto take = [&](size_t bytes) {
    const size_t at = plan.total;
    plan.total += ScratchAlignUp(bytes);
    return at;
  };
  const int64_t items = nq * topk;
  if (needs.probs) plan.probs = take(nq * heads * topk * sizeof(float));
  if (needs.ds) plan.ds = take(nq * heads * topk * sizeof(float));
  size_t temp_bytes = 0;
  if (needs.transpose) {
    plan.offsets = take((nk + 1) * sizeof(int32_t));
    plan.sort_keys = take(2 * items * sizeof(uint32_t));
    plan.sort_values = take(2 * items * sizeof(int32_t));
    cub::DoubleBuffer<uint32_t> sort_keys(nullptr, nullptr);
    cub::DoubleBuffer<int32_t> sort_values(nullptr, nullptr);
    size_t sort_bytes = 0, scan_bytes = 0;
    GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, sort_keys, sort_values, items, 0, KeyBits(nk)));
    GLM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
        nullptr, scan_bytes, static_cast<int32_t*>(nullptr),
        static_cast<int32_t*>(nullptr), nk + 1));
    temp_bytes = std::max({temp_bytes, sort_bytes, scan_bytes});
  }
  if (needs.query_lists) {
    plan.query_columns = take(items * sizeof(uint32_t));
    plan.query_slots = take(items * sizeof(int32_t));
    plan.slot_ids = take(items * sizeof(int32_t));
    plan.segments = take((nq + 1) * sizeof(int32_t));
    size_t segmented_bytes = 0;
    GLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
        nullptr, segmented_bytes, static_cast<const uint32_t*>(nullptr),
        static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
        static_cast<int32_t*>(nullptr), static_cast<int>(items),
        static_cast<int>(nq), static_cast<const int32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr)));
    temp_bytes = std::max(temp_bytes, segmented_bytes);
  }
  if (needs.key_lists) {
    plan.key_columns = take(items * sizeof(uint32_t));
    plan.key_payloads = take(items * sizeof(int32_t));
  }
  if (temp_bytes > 0) {
    plan.temp_bytes = temp_bytes;
    plan.temp = take(temp_bytes);
  }
  return plan;
}

// Builds the CSR transpose of keys [nq, topk]: the pairs t*topk + j that chose
// key token s are pairs[offsets[s] .. offsets[s+1]), ascending (radix sort is
// stable). Returns `pairs` (all nq*topk items; -1 slots last).
const int32_t* TransposeKeys(CudaContext& ctx, const int32_t* keys,
                             int64_t items, int64_t nk, char* scratch,
                             const ScratchPlan& plan, int32_t* offsets) {
  cudaStream_t stream = ctx.stream();
  uint32_t* sort_keys = reinterpret_cast<uint32_t*>(scratch + plan.sort_keys);
  int32_t* sort_values = reinterpret_cast<int32_t*>(scratch + plan.sort_values);
  void* temp = scratch + plan.temp;
  GLM_CUDA_CHECK(
      cudaMemsetAsync(offsets, 0, (nk + 1) * sizeof(int32_t), stream));
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  TransposeInputKernel<<<blocks, kThreads, 0, stream>>>(
      keys, items, static_cast<int32_t>(nk), sort_keys, sort_values, offsets);
  GLM_CUDA_CHECK_LAUNCH();
  size_t scan_bytes = plan.temp_bytes;
  GLM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, scan_bytes, offsets,
                                               offsets, nk + 1, stream));
  cub::DoubleBuffer<uint32_t> sorted_keys(sort_keys, sort_keys + items);
  cub::DoubleBuffer<int32_t> sorted_values(sort_values, sort_values + items);
  size_t sort_bytes = plan.temp_bytes;
  GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, sorted_keys,
                                                 sorted_values, items, 0,
                                                 KeyBits(nk), stream));
  return sorted_values.Current();
}

// Each query's keys ascending (a -1 slot, read as 0xffffffff, sorts last),
// with the slots they came from: the tiled kernels' row lists.
RowLists SortQueryLists(CudaContext& ctx, const int32_t* keys, int64_t nq,
                        int64_t topk, char* scratch, const ScratchPlan& plan) {
  cudaStream_t stream = ctx.stream();
  const int64_t items = nq * topk;
  auto* columns = reinterpret_cast<uint32_t*>(scratch + plan.query_columns);
  auto* slots = reinterpret_cast<int32_t*>(scratch + plan.query_slots);
  auto* slot_ids = reinterpret_cast<int32_t*>(scratch + plan.slot_ids);
  auto* segments = reinterpret_cast<int32_t*>(scratch + plan.segments);
  QueryListInputKernel<<<GridStrideBlocks(std::max(items, nq + 1)), kThreads, 0,
                         stream>>>(nq, static_cast<int>(topk), slot_ids,
                                   segments);
  GLM_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = plan.temp_bytes;
  GLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
      scratch + plan.temp, temp_bytes, reinterpret_cast<const uint32_t*>(keys),
      columns, slot_ids, slots, static_cast<int>(items), static_cast<int>(nq),
      segments, segments + 1, 0, 32, stream));
  RowLists lists;
  lists.columns = columns;
  lists.payloads = slots;
  lists.width = topk;
  return lists;
}

// The tiled kernels pay for every key of a tile a selected key falls in, so
// they run when the selection is dense: at least one key in 8 of nk selected
// per query (DSA at 4k-16k tokens with top-2048), and the accumulators fit in
// shared memory. Sparser selections (long sequences) gather rows per query.
constexpr size_t kMaxTileSharedBytes = 200 * 1024;

bool UseTiles(int64_t nk, int64_t topk, size_t shared_bytes) {
  return 8 * topk >= nk && nk < (int64_t{1} << 31) &&
         shared_bytes <= kMaxTileSharedBytes;
}

dim3 TileGrid(int64_t rows, int64_t heads) {
  return dim3(static_cast<unsigned int>((rows + kTileRows - 1) / kTileRows),
              static_cast<unsigned int>(heads));
}

// The forward kernels for a call (tiled when `lists` is given), writing
// whichever of out, probs and lse are given.
void RunForward(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                ConstMatrixView v, const int32_t* keys, const RowLists* lists,
                int64_t topk, int64_t heads, float scale, MatrixView out,
                MatrixView probs, float* lse) {
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  if (lists != nullptr) {
    const size_t shared = TileSharedBytes(kTileRows * v.cols);
    AllowShared(TiledForwardKernel, shared);
    TiledForwardKernel<<<TileGrid(nq, heads), kThreads, shared, ctx.stream()>>>(
        q, k, v, *lists, nq, nk, static_cast<int>(topk),
        static_cast<int>(heads), scale, out, probs, lse);
  } else {
    const size_t shared = (2 * topk + q.cols) * sizeof(float);
    assert(shared <= kMaxSharedBytes);
    ForwardKernel<<<q.rows, kThreads, shared, ctx.stream()>>>(
        q, k, v, keys, static_cast<int>(topk), static_cast<int>(heads), scale,
        out, probs, lse);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

// Whether the tiled kernels run for these shapes (see UseTiles).
bool TiledForward(int64_t nk, int64_t topk, int64_t dv) {
  return UseTiles(nk, topk, TileSharedBytes(kTileRows * dv));
}

}  // namespace

void SparseAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView k, ConstMatrixView v,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, float* lse) {
  assert(q.cols == k.cols && k.rows == v.rows && k.rows % heads == 0);
  assert(out.rows == q.rows && out.cols == v.cols && lse != nullptr);
  assert(q.rows % heads == 0 && topk > 0);
  if (q.rows == 0) return;
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  assert(nq * topk <= INT32_MAX);
  if (!TiledForward(nk, topk, v.cols)) {
    RunForward(ctx, q, k, v, keys, nullptr, topk, heads, scale, out, {}, lse);
    return;
  }
  ScratchNeeds needs;
  needs.query_lists = true;
  const ScratchPlan plan = PlanScratch(nq, nk, topk, heads, needs);
  char* scratch = static_cast<char*>(ctx.Scratch(plan.total));
  const RowLists lists = SortQueryLists(ctx, keys, nq, topk, scratch, plan);
  RunForward(ctx, q, k, v, keys, &lists, topk, heads, scale, out, {}, lse);
}

namespace {

// Dense selections with bf16 operands: the heads' sums for every visible key
// of a block of queries (AttentionKeySums, the scores never stored), then
// gathered at the selected keys. Blocks keep the sums within
// kSumsBlockBytes (at 4k all queries are one block; at 64k, 1,024).
void KeyWeightsFromSums(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                        const int32_t* keys, int64_t heads, float scale,
                        const float* lse, MatrixView weights) {
  constexpr int64_t kSumsBlockBytes = int64_t{256} << 20;
  const int64_t nq = q.rows / heads, nk = k.rows / heads, topk = weights.cols;
  const int64_t ld = (nk + 3) / 4 * 4;
  const int64_t block_rows =
      std::max<int64_t>(1, kSumsBlockBytes / (ld * int64_t{sizeof(float)}));
  float* sums = static_cast<float*>(
      ctx.Scratch(std::min(nq, block_rows) * ld * sizeof(float)));
  for (int64_t first = 0; first < nq; first += block_rows) {
    const int64_t rows = std::min(block_rows, nq - first);
    const int64_t key_end = VisibleKeyEnd(nq, nk, first + rows);
    AttentionKeySums(ctx, q, k, heads, scale, lse, first, rows, key_end,
                     nq == nk, sums, ld);
    GatherKeySumsKernel<<<GridStrideBlocks(rows * topk), kBlockThreads, 0,
                          ctx.stream()>>>(sums, ld, keys + first * topk,
                                          weights.Rows(first, rows));
    GLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void SparseAttentionKeyWeights(CudaContext& ctx, ConstMatrixView q,
                               ConstMatrixView k, const int32_t* keys,
                               int64_t topk, int64_t heads, float scale,
                               const float* lse, MatrixView weights) {
  assert(q.cols == k.cols && q.rows % heads == 0 && k.rows % heads == 0);
  assert(weights.rows == q.rows / heads && weights.cols == topk);
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  if (nq == 0) return;
  cudaStream_t stream = ctx.stream();
  if (!UseTiles(nk, topk, 0) || !RowFitsShared(nk + topk)) {
    // Sparse selections: each row's probabilities by the forward's gather
    // kernel (normalized by its own sums, equal to exp(score - lse) up to
    // rounding; it reads no values when it writes no output: k stands in).
    ScratchNeeds needs;
    needs.probs = true;
    const ScratchPlan plan = PlanScratch(nq, nk, topk, heads, needs);
    char* scratch = static_cast<char*>(ctx.Scratch(plan.total));
    MatrixView probs{reinterpret_cast<float*>(scratch + plan.probs), q.rows,
                     topk, topk};
    // The gather kernel reads F32: bf16 queries and keys are widened.
    const std::vector<MatrixView> f = AsF32(ctx, {q, k});
    RunForward(ctx, f[0], f[1], f[1], keys, nullptr, topk, heads, scale, {},
               probs, nullptr);
    HeadSumKernel<<<GridStrideBlocks(nq * topk), kBlockThreads, 0, stream>>>(
        probs, static_cast<int>(heads), weights);
    GLM_CUDA_CHECK_LAUNCH();
    return;
  }
  if (AttentionKeySumsSupported(q, k, heads)) {
    KeyWeightsFromSums(ctx, q, k, keys, heads, scale, lse, weights);
    return;
  }
  // Dense selections: every head's scores for a block of queries by one
  // batched GEMM over the heads (it takes the plain scratch for itself, so the
  // scores live in the composite scratch, at most kScoreBlockBytes for all
  // heads), then the selected ones summed over heads in order. In
  // self-attention (nq == nk: query t's keys are <= t) a block of queries forms
  // its scores with the keys up to its last query only (VisibleKeyEnd). Blocks
  // stay as large as the scratch allows: smaller ones would skip more keys but
  // pay for more, smaller products (512-query blocks took twice the time at
  // 4k).
  constexpr int64_t kScoreBlockBytes = int64_t{512} << 20;
  const int64_t block_rows = std::max<int64_t>(
      1, kScoreBlockBytes / (heads * nk * int64_t{sizeof(float)}));
  float* scores = static_cast<float*>(ctx.CompositeScratch(
      heads * std::min(nq, block_rows) * nk * sizeof(float)));
  // Allowed once for the widest rows; each block launches with its own.
  RowSharedBytes(HeadWeightsKernel, nk + topk);
  for (int64_t first = 0; first < nq; first += block_rows) {
    const int64_t rows = std::min(block_rows, nq - first);
    const int64_t key_end = VisibleKeyEnd(nq, nk, first + rows);
    InterleavedLinear(ctx, q.Rows(first * heads, rows * heads),
                      k.Rows(0, key_end * heads), heads, scores);
    HeadWeightsKernel<<<rows, kBlockThreads, (key_end + topk) * sizeof(float),
                        stream>>>(scores, rows, key_end, keys + first * topk,
                                  lse + first * heads, static_cast<int>(heads),
                                  scale, weights.Rows(first, rows));
    GLM_CUDA_CHECK_LAUNCH();
  }
}

void SparseAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView k, ConstMatrixView v,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, ConstMatrixView dout, MatrixView dq,
                             MatrixView dk, MatrixView dv) {
  assert(q.cols == k.cols && k.rows == v.rows && k.rows % heads == 0);
  assert(q.rows % heads == 0 && topk > 0);
  assert(dout.rows == q.rows && dout.cols == v.cols);
  assert(dq.empty() || (dq.rows == q.rows && dq.cols == q.cols));
  assert(dk.empty() || (dk.rows == k.rows && dk.cols == k.cols));
  assert(dv.empty() || (dv.rows == v.rows && dv.cols == v.cols));
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  assert(nq * topk <= INT32_MAX);
  if (q.rows == 0) return;
  const bool key_pass = (!dk.empty() || !dv.empty()) && k.rows > 0;
  const size_t query_shared =
      TileSharedBytes(dq.empty() ? 0 : kTileRows * q.cols);
  const size_t key_shared = TileSharedBytes(
      kTileRows * ((dk.empty() ? 0 : k.cols) + (dv.empty() ? 0 : v.cols)));
  const bool tiled = UseTiles(nk, topk, std::max(query_shared, key_shared)) &&
                     TiledForward(nk, topk, v.cols);
  ScratchNeeds needs;
  needs.probs = true;
  needs.ds = !dk.empty();
  needs.transpose = key_pass;
  needs.query_lists = tiled;
  needs.key_lists = tiled && key_pass;
  const ScratchPlan plan = PlanScratch(nq, nk, topk, heads, needs);
  char* scratch = static_cast<char*>(ctx.Scratch(plan.total));
  // The probabilities again, from the forward's own kernels: the same values
  // the forward normalized its output with.
  const MatrixView probs{reinterpret_cast<float*>(scratch + plan.probs), q.rows,
                         topk, topk};
  RowLists lists;
  if (tiled) lists = SortQueryLists(ctx, keys, nq, topk, scratch, plan);
  RunForward(ctx, q, k, v, keys, tiled ? &lists : nullptr, topk, heads, scale,
             {}, probs, nullptr);
  float* ds =
      dk.empty() ? nullptr : reinterpret_cast<float*>(scratch + plan.ds);
  cudaStream_t stream = ctx.stream();
  if (!dq.empty() || !dk.empty()) {
    if (tiled) {
      AllowShared(TiledQueryGradKernel, query_shared);
      TiledQueryGradKernel<<<TileGrid(nq, heads), kThreads, query_shared,
                             stream>>>(
          k, v, lists, nq, nk, static_cast<int>(topk), static_cast<int>(heads),
          scale, probs, dout, dq, ds);
    } else {
      const size_t shared = (2 * topk + v.cols) * sizeof(float);
      assert(shared <= kMaxSharedBytes);
      QueryGradKernel<<<q.rows, kThreads, shared, stream>>>(
          k, v, keys, static_cast<int>(topk), static_cast<int>(heads), scale,
          probs, dout, dq, ds);
    }
    GLM_CUDA_CHECK_LAUNCH();
  }
  if (!key_pass) return;
  int32_t* offsets = reinterpret_cast<int32_t*>(scratch + plan.offsets);
  const int32_t* pairs =
      TransposeKeys(ctx, keys, nq * topk, nk, scratch, plan, offsets);
  if (tiled) {
    RowLists key_lists;
    key_lists.columns = reinterpret_cast<uint32_t*>(scratch + plan.key_columns);
    key_lists.payloads =
        reinterpret_cast<int32_t*>(scratch + plan.key_payloads);
    key_lists.offsets = offsets;
    KeyListKernel<<<GridStrideBlocks(nq * topk), kThreads, 0, stream>>>(
        pairs, nq * topk, static_cast<int>(topk),
        const_cast<uint32_t*>(key_lists.columns),
        const_cast<int32_t*>(key_lists.payloads));
    GLM_CUDA_CHECK_LAUNCH();
    AllowShared(TiledKeyGradKernel, key_shared);
    TiledKeyGradKernel<<<TileGrid(nk, heads), kThreads, key_shared, stream>>>(
        q, probs, dout, ds, key_lists, nq, nk, static_cast<int>(topk),
        static_cast<int>(heads), dk, dv);
  } else {
    KeyGradKernel<<<k.rows, kThreads, 0, stream>>>(
        q, probs, dout, ds, offsets, pairs, static_cast<int>(topk),
        static_cast<int>(heads), dk, dv);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
