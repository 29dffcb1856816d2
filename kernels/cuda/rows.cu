#include <algorithm>
#include <cassert>
#include <climits>
#include <cstddef>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rows.cuh"

namespace glm::cuda {
namespace {

// Bits a radix sort needs for keys in [0, count).
int KeyBits(int64_t count) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < count) ++bits;
  return bits;
}

// Kernels take raw pointers and row strides: the views' methods are host-only.
// out[r] = table[ids[r]] (times scale[r] when given), one block per row.
__global__ void GatherRowsKernel(const float* __restrict__ table,
                                 int64_t table_stride,
                                 const int32_t* __restrict__ ids,
                                 const float* __restrict__ scale,
                                 float* __restrict__ out, int64_t out_stride,
                                 int64_t cols) {
  const float* in = table + ids[blockIdx.x] * table_stride;
  float* o = out + blockIdx.x * out_stride;
  const float s = scale == nullptr ? 1.f : scale[blockIdx.x];
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    o[c] = scale == nullptr ? in[c] : s * in[c];
  }
}

__global__ void IotaKernel(int32_t* __restrict__ values, int64_t n) {
  const int64_t i = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (i < n) values[i] = static_cast<int32_t>(i);
}

// The end of the run of `row` in sorted[head, n): the first position past
// head whose id is greater. Probes at doubling distances, then halves the
// last gap: a few dependent loads for MoE's runs of top-k sources, and for
// the long runs of a frequent token's embedding rows alike.
__device__ int64_t RunEnd(const int32_t* __restrict__ sorted, int64_t head,
                          int64_t n, int32_t row) {
  int64_t lo = head + 1, hi = lo, step = 1;
  while (hi < n && sorted[hi] == row) {
    lo = hi + 1;
    step *= 2;
    hi = head + step;
  }
  hi = hi < n ? hi : n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] == row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Sources added per batch of loads (issued together, added in order): MoE's
// top-k of 8 in one batch.
constexpr int kScatterBatch = 8;

// Columns [c, c + kWidth) of row r of an F32 or BF16 view, widened (kWidth
// 4: a QuadAligned view, one 16- or 8-byte load).
template <int kWidth>
__device__ __forceinline__ void LoadColumns(const ConstMatrixView& view,
                                            int64_t r, int64_t c,
                                            float (&x)[kWidth]) {
  if constexpr (kWidth == 4) {
    const float4 q = LoadQuad(view, r, c);
    x[0] = q.x;
    x[1] = q.y;
    x[2] = q.z;
    x[3] = q.w;
  } else {
    x[0] = Load(view, r, c);
  }
}

// `acc` with columns [c, c + kWidth) of sources order[k, k + kCount) added,
// each times its scale (1 when scale is null): every load issued first, then
// the adds in source order, each rounded as the CPU's serial loop does. The
// batched loop and its tail both add through here.
template <int kCount, int kWidth>
__device__ __forceinline__ void AddSources(float (&acc)[kWidth],
                                           const ConstMatrixView& src,
                                           const int32_t* __restrict__ order,
                                           const float* __restrict__ scale,
                                           int64_t k, int64_t c) {
  float s[kCount], x[kCount][kWidth];
#pragma unroll
  for (int b = 0; b < kCount; ++b) {
    const int32_t i = order[k + b];
    s[b] = scale ? scale[i] : 1.f;
    LoadColumns<kWidth>(src, i, c, x[b]);
  }
#pragma unroll
  for (int b = 0; b < kCount; ++b) {
#pragma unroll
    for (int w = 0; w < kWidth; ++w) acc[w] += s[b] * x[b][w];
  }
}

// Adds to each destination row its sources in ascending source order, each
// add rounded as the CPU's serial loop does; kWidth columns a thread (4:
// QuadAligned views, so a source row's group is one 16- or 8-byte load).
// By position (kByOutputRow false): block (p, y) for position p of the
// sorted row ids and column groups y * blockDim.x + threadIdx.x, stepping
// gridDim.y * blockDim.x groups; only the first position of each run of
// equal ids works (embedding gradients: few runs, some long). By output row
// (true): threads_per_row threads (a power of two) a destination row, whose
// run [run_begin, run_end) the index holds (MarkRunsKernel), or, where
// run_begin is null, [r * n, (r + 1) * n) (AddRowGroups: n sources a row);
// rows without sources are left as they are (MoE's unpermute: every block
// works, none waits on an empty position or a search).
template <int kWidth, bool kByOutputRow>
__global__ void ScatterAddSortedKernel(ConstMatrixView src, int64_t n,
                                       const int32_t* __restrict__ sorted_rows,
                                       const int32_t* __restrict__ order,
                                       const int32_t* __restrict__ run_begin,
                                       const int32_t* __restrict__ run_end,
                                       const float* __restrict__ scale,
                                       MatrixView out, int threads_per_row) {
  int32_t row;
  int64_t head, end, c_first, c_step;
  if constexpr (kByOutputRow) {
    const int64_t r = int64_t{blockIdx.x} * (blockDim.x / threads_per_row) +
                      threadIdx.x / threads_per_row;
    if (r >= out.rows) return;
    row = static_cast<int32_t>(r);
    // Fixed runs of n sources a row where no index of runs is given.
    head = run_begin != nullptr ? run_begin[r] : r * n;
    end = run_end != nullptr ? run_end[r] : head + n;
    if (head == end) return;
    c_first = int64_t{threadIdx.x % threads_per_row} * kWidth;
    c_step = int64_t{threads_per_row} * kWidth;
  } else {
    head = blockIdx.x;
    row = sorted_rows[head];
    if (head > 0 && sorted_rows[head - 1] == row) return;
    end = RunEnd(sorted_rows, head, n, row);
    c_first = (int64_t{blockIdx.y} * blockDim.x + threadIdx.x) * kWidth;
    c_step = int64_t{gridDim.y} * blockDim.x * kWidth;
  }
  for (int64_t c = c_first; c < out.cols; c += c_step) {
    // The destination row is read and written once, its sources kScatterBatch
    // at a time: those gathered loads are what the kernel waits on.
    float* o = &At(out, row, c);
    float acc[kWidth];
#pragma unroll
    for (int w = 0; w < kWidth; ++w) acc[w] = o[w];
    int64_t k = head;
    for (; k + kScatterBatch <= end; k += kScatterBatch) {
      AddSources<kScatterBatch>(acc, src, order, scale, k, c);
    }
    for (; k < end; ++k) AddSources<1>(acc, src, order, scale, k, c);
#pragma unroll
    for (int w = 0; w < kWidth; ++w) o[w] = acc[w];
  }
}

constexpr int kRowsPerBlock = kBlockThreads / 32;

// Which source row i, and which dout row, the combine's backward gives warp
// w: by ScatterAddRows' rows (i = w, dout row rows[i]), or by AddRowGroups'
// sources (i = sources[w], dout row w / per_row: a block's warps share a
// token's dout row, read from memory once).
struct CombineOrder {
  const int32_t* rows;
  const int32_t* sources;
  int64_t per_row;

  __device__ int64_t Source(int64_t w) const {
    return sources ? sources[w] : w;
  }
  __device__ int64_t DoutRow(int64_t w) const {
    return sources ? w / per_row : rows[w];
  }
};

// One warp per source row (rows are a few thousand floats: a block's
// reduction and barriers would cost more than the row's loads); kWidth
// columns a step (4: QuadAligned views, 16-byte loads). dsrc (F32 or BF16)
// empty: skipped; dscale (a column) empty: skipped, else written at row
// dscale_rows[i] (null: i).
template <int kWidth>
__global__ void CombineBackwardKernel(ConstMatrixView src, CombineOrder order,
                                      const float* __restrict__ scale,
                                      ConstMatrixView dout, MatrixView dsrc,
                                      MatrixView dscale,
                                      const int32_t* __restrict__ dscale_rows) {
  using Vector = std::conditional_t<kWidth == 4, float4, float>;
  const int64_t w = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= src.rows) return;  // the whole warp
  const int64_t i = order.Source(w);
  const auto* d =
      reinterpret_cast<const Vector*>(&At(dout, order.DoutRow(w), 0));
  const bool out = dsrc.data != nullptr, dot_wanted = dscale.data != nullptr;
  const float s = scale ? scale[i] : 1.f;
  double dot = 0;
  for (int64_t c = lane; c < src.cols / kWidth; c += 32) {
    const Vector g = d[c];
    if constexpr (kWidth == 4) {
      if (out) {
        StoreQuad(dsrc, i, 4 * c,
                  make_float4(s * g.x, s * g.y, s * g.z, s * g.w));
      }
      if (dot_wanted) {
        const float4 x = LoadQuad(src, i, 4 * c);
        dot += double{x.x} * g.x + double{x.y} * g.y + double{x.z} * g.z +
               double{x.w} * g.w;
      }
    } else {
      if (out) Store(dsrc, i, c, s * g);
      if (dot_wanted) dot += double{Load(src, i, c)} * g;
    }
  }
  if (!dot_wanted) return;
  const double total = WarpSum(dot);
  if (lane == 0) {
    At(dscale, dscale_rows ? dscale_rows[i] : i, 0) = static_cast<float>(total);
  }
}

// run_begin[sorted[p]] = p at the first position p of each run of equal
// ids, run_end[...] = p + 1 at its last (both zeroed before: empty runs).
__global__ void MarkRunsKernel(const int32_t* __restrict__ sorted, int64_t n,
                               int32_t* __restrict__ run_begin,
                               int32_t* __restrict__ run_end) {
  const int64_t p = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (p >= n) return;
  const int32_t row = sorted[p];
  if (p == 0 || sorted[p - 1] != row) run_begin[row] = static_cast<int32_t>(p);
  if (p == n - 1 || sorted[p + 1] != row) {
    run_end[row] = static_cast<int32_t>(p + 1);
  }
}

// The inverse of a row-id array: sorted_rows[k] ascending and order[k] the
// source index it came from, ascending within equal ids (the sort is stable);
// where asked for, each of the num_rows ids' run [run_begin, run_end) in
// them (empty for ids without sources), else null.
struct InverseIndex {
  const int32_t* sorted_rows;
  const int32_t* order;
  const int32_t* run_begin;
  const int32_t* run_end;
};

InverseIndex SortRowIds(CudaContext& ctx, const int32_t* rows, int64_t n,
                        int64_t num_rows, bool runs = false) {
  assert(n < INT_MAX && num_rows <= INT_MAX);
  const auto* keys_in = reinterpret_cast<const unsigned*>(rows);
  const int end_bit = KeyBits(num_rows);
  size_t sort_bytes = 0;
  GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, keys_in, static_cast<unsigned*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(n), 0, end_bit, ctx.stream()));
  const size_t array_bytes = ScratchAlignUp(n * sizeof(int32_t));
  const size_t run_bytes =
      runs ? ScratchAlignUp(num_rows * sizeof(int32_t)) : 0;
  auto* base = static_cast<char*>(
      ctx.Scratch(3 * array_bytes + 2 * run_bytes + sort_bytes));
  auto* sorted_rows = reinterpret_cast<int32_t*>(base);
  auto* iota = reinterpret_cast<int32_t*>(base + array_bytes);
  auto* order = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
  auto* run_begin = reinterpret_cast<int32_t*>(base + 3 * array_bytes);
  auto* run_end =
      reinterpret_cast<int32_t*>(base + 3 * array_bytes + run_bytes);
  void* sort_storage = base + 3 * array_bytes + 2 * run_bytes;

  const int64_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  IotaKernel<<<blocks, kBlockThreads, 0, ctx.stream()>>>(iota, n);
  GLM_CUDA_CHECK_LAUNCH();
  GLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      sort_storage, sort_bytes, keys_in,
      reinterpret_cast<unsigned*>(sorted_rows), iota, order,
      static_cast<int>(n), 0, end_bit, ctx.stream()));
  if (!runs) return {sorted_rows, order, nullptr, nullptr};
  GLM_CUDA_CHECK(cudaMemsetAsync(run_begin, 0, 2 * run_bytes, ctx.stream()));
  MarkRunsKernel<<<blocks, kBlockThreads, 0, ctx.stream()>>>(
      sorted_rows, n, run_begin, run_end);
  GLM_CUDA_CHECK_LAUNCH();
  return {sorted_rows, order, run_begin, run_end};
}

// The grouped positions' slots and tokens from the stable sort's order.
__global__ void GroupedRowsKernel(const int32_t* __restrict__ order, int64_t n,
                                  int64_t per_token,
                                  int32_t* __restrict__ slots,
                                  int32_t* __restrict__ tokens) {
  const int64_t p = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (p >= n) return;
  slots[p] = order[p];
  tokens[p] = static_cast<int32_t>(order[p] / per_token);
}

// offsets[e] = the first sorted position whose expert is >= e (a binary
// search per expert, e <= experts).
__global__ void ExpertOffsetsKernel(const int32_t* __restrict__ sorted,
                                    int64_t n, int64_t experts,
                                    int32_t* __restrict__ offsets) {
  const int64_t e = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (e > experts) return;
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sorted[mid] < e) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  offsets[e] = static_cast<int32_t>(lo);
}

__global__ void AddExpertLoadsKernel(const int32_t* __restrict__ offsets,
                                     int64_t experts,
                                     int32_t* __restrict__ loads) {
  const int64_t e = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (e < experts) loads[e] += offsets[e + 1] - offsets[e];
}

// ScatterAddSortedKernel by output row: as many threads a row as its
// column groups need, up to a block (run_begin null: runs of n sources).
void AddByOutputRow(CudaContext& ctx, ConstMatrixView src, int64_t n,
                    const int32_t* sorted_rows, const int32_t* order,
                    const int32_t* run_begin, const int32_t* run_end,
                    const float* scale, MatrixView out) {
  const bool quads = QuadAligned(src, out);
  const int64_t groups = quads ? src.cols / 4 : src.cols;
  int threads_per_row = 1;
  while (threads_per_row < kBlockThreads && threads_per_row < groups) {
    threads_per_row *= 2;
  }
  const int64_t rows_per_block = kBlockThreads / threads_per_row;
  const auto blocks =
      static_cast<unsigned>((out.rows + rows_per_block - 1) / rows_per_block);
  if (quads) {
    ScatterAddSortedKernel<4, true><<<blocks, kBlockThreads, 0, ctx.stream()>>>(
        src, n, sorted_rows, order, run_begin, run_end, scale, out,
        threads_per_row);
  } else {
    ScatterAddSortedKernel<1, true><<<blocks, kBlockThreads, 0, ctx.stream()>>>(
        src, n, sorted_rows, order, run_begin, run_end, scale, out,
        threads_per_row);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

// ScatterAddRowsBackward and AddRowGroupsBackward: CombineBackwardKernel over
// `order`.
void CombineBackward(CudaContext& ctx, ConstMatrixView src, CombineOrder order,
                     const float* scale, ConstMatrixView dout, MatrixView dsrc,
                     MatrixView dscale, const int32_t* dscale_rows) {
  assert(dout.cols == src.cols);
  assert(dsrc.empty() || (dsrc.rows == src.rows && dsrc.cols == src.cols));
  assert(dscale.empty() || (dscale.cols == 1 && (dscale_rows != nullptr ||
                                                 dscale.rows == src.rows)));
  if (src.rows == 0 || (dsrc.empty() && dscale.empty())) return;
  const bool quads =
      QuadAligned(src, dout) && (dsrc.empty() || QuadAligned(dsrc));
  const int64_t blocks = (src.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (quads) {
    CombineBackwardKernel<4><<<blocks, kBlockThreads, 0, ctx.stream()>>>(
        src, order, scale, dout, dsrc, dscale, dscale_rows);
  } else {
    CombineBackwardKernel<1><<<blocks, kBlockThreads, 0, ctx.stream()>>>(
        src, order, scale, dout, dsrc, dscale, dscale_rows);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

// token_rows[slots[p]] = p: each position at its (token, k) slot.
__global__ void PositionsAtSlotsKernel(const int32_t* __restrict__ slots,
                                       int64_t count,
                                       int32_t* __restrict__ token_rows) {
  const int64_t p = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (p < count) token_rows[slots[p]] = static_cast<int32_t>(p);
}

// Each token's per_token positions in ascending order (an insertion sort:
// per_token is the router's top-k, a few).
__global__ void SortTokenRowsKernel(int64_t tokens, int64_t per_token,
                                    int32_t* __restrict__ token_rows) {
  const int64_t t = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x;
  if (t >= tokens) return;
  int32_t* rows = token_rows + t * per_token;
  for (int64_t j = 1; j < per_token; ++j) {
    const int32_t p = rows[j];
    int64_t k = j;
    for (; k > 0 && rows[k - 1] > p; --k) rows[k] = rows[k - 1];
    rows[k] = p;
  }
}

}  // namespace

void EmbeddingForward(CudaContext& ctx, ConstMatrixView table,
                      const int32_t* ids, MatrixView out) {
  GatherRows(ctx, table, ids, nullptr, out);
}

void GatherRows(CudaContext& ctx, ConstMatrixView x, const int32_t* rows,
                const float* scale, MatrixView out) {
  assert(x.cols == out.cols);
  if (out.rows == 0) return;
  GatherRowsKernel<<<out.rows, kBlockThreads, 0, ctx.stream()>>>(
      x.data, x.stride, rows, scale, out.data, out.stride, out.cols);
  GLM_CUDA_CHECK_LAUNCH();
}

void EmbeddingBackward(CudaContext& ctx, ConstMatrixView dout,
                       const int32_t* ids, MatrixView dtable) {
  ScatterAddRows(ctx, dout, ids, nullptr, dtable);
}

void ScatterAddRows(CudaContext& ctx, ConstMatrixView src, const int32_t* rows,
                    const float* scale, MatrixView out) {
  assert(src.cols == out.cols);
  if (src.rows == 0) return;
  const bool quads = QuadAligned(src, out);
  const int64_t groups = quads ? src.cols / 4 : src.cols;
  const bool by_row = out.rows < src.rows || groups < 32;
  const InverseIndex inverse =
      SortRowIds(ctx, rows, src.rows, out.rows, /*runs=*/by_row);
  if (by_row) {
    // Onto fewer rows (MoE's unpermute: runs of top-k) or rows narrower than
    // a warp (the routing weights' gradients by slot): by output row.
    AddByOutputRow(ctx, src, src.rows, inverse.sorted_rows, inverse.order,
                   inverse.run_begin, inverse.run_end, scale, out);
    return;
  }
  // Wide rows onto as many rows or more (embedding gradients: a frequent
  // token is one long run): by position, each row's columns over blocks.
  const int64_t column_blocks =
      std::min<int64_t>((groups + kBlockThreads - 1) / kBlockThreads, 65535);
  const dim3 grid(static_cast<unsigned>(src.rows),
                  static_cast<unsigned>(column_blocks));
  if (quads) {
    ScatterAddSortedKernel<4, false><<<grid, kBlockThreads, 0, ctx.stream()>>>(
        src, src.rows, inverse.sorted_rows, inverse.order, nullptr, nullptr,
        scale, out, kBlockThreads);
  } else {
    ScatterAddSortedKernel<1, false><<<grid, kBlockThreads, 0, ctx.stream()>>>(
        src, src.rows, inverse.sorted_rows, inverse.order, nullptr, nullptr,
        scale, out, kBlockThreads);
  }
  GLM_CUDA_CHECK_LAUNCH();
}

void ScatterAddRowsBackward(CudaContext& ctx, ConstMatrixView src,
                            const int32_t* rows, const float* scale,
                            ConstMatrixView dout, MatrixView dsrc,
                            MatrixView dscale, const int32_t* dscale_rows) {
  CombineBackward(ctx, src, {rows, nullptr, 0}, scale, dout, dsrc, dscale,
                  dscale_rows);
}

void AddRowGroupsBackward(CudaContext& ctx, ConstMatrixView src,
                          const int32_t* sources, int64_t per_row,
                          const float* scale, ConstMatrixView dout,
                          MatrixView dsrc, MatrixView dscale,
                          const int32_t* dscale_rows) {
  assert(per_row > 0 && src.rows == dout.rows * per_row);
  CombineBackward(ctx, src, {nullptr, sources, per_row}, scale, dout, dsrc,
                  dscale, dscale_rows);
}

void GroupByExpert(CudaContext& ctx, const int32_t* expert, int64_t count,
                   int64_t per_token, int64_t experts, int32_t* slots,
                   int32_t* tokens, int32_t* offsets) {
  assert(experts > 0 && per_token > 0);
  const int64_t offset_blocks = (experts + kBlockThreads) / kBlockThreads;
  if (count == 0) {
    GLM_CUDA_CHECK(cudaMemsetAsync(offsets, 0, (experts + 1) * sizeof(int32_t),
                                   ctx.stream()));
    return;
  }
  const InverseIndex inverse = SortRowIds(ctx, expert, count, experts);
  GroupedRowsKernel<<<(count + kBlockThreads - 1) / kBlockThreads,
                      kBlockThreads, 0, ctx.stream()>>>(
      inverse.order, count, per_token, slots, tokens);
  GLM_CUDA_CHECK_LAUNCH();
  ExpertOffsetsKernel<<<offset_blocks, kBlockThreads, 0, ctx.stream()>>>(
      inverse.sorted_rows, count, experts, offsets);
  GLM_CUDA_CHECK_LAUNCH();
}

void TokenRows(CudaContext& ctx, const int32_t* slots, int64_t count,
               int64_t per_token, int32_t* token_rows) {
  assert(per_token > 0 && count % per_token == 0);
  if (count == 0) return;
  PositionsAtSlotsKernel<<<(count + kBlockThreads - 1) / kBlockThreads,
                           kBlockThreads, 0, ctx.stream()>>>(slots, count,
                                                             token_rows);
  GLM_CUDA_CHECK_LAUNCH();
  const int64_t tokens = count / per_token;
  SortTokenRowsKernel<<<(tokens + kBlockThreads - 1) / kBlockThreads,
                        kBlockThreads, 0, ctx.stream()>>>(tokens, per_token,
                                                          token_rows);
  GLM_CUDA_CHECK_LAUNCH();
}

void AddRowGroups(CudaContext& ctx, ConstMatrixView src, const int32_t* sources,
                  int64_t per_row, const float* scale, MatrixView out) {
  assert(src.cols == out.cols && src.rows == out.rows * per_row);
  if (src.rows == 0) return;
  AddByOutputRow(ctx, src, per_row, /*sorted_rows=*/nullptr, sources,
                 /*run_begin=*/nullptr, /*run_end=*/nullptr, scale, out);
}

void AddExpertLoads(CudaContext& ctx, const int32_t* offsets, int64_t experts,
                    int32_t* loads) {
  if (experts == 0) return;
  AddExpertLoadsKernel<<<(experts + kBlockThreads - 1) / kBlockThreads,
                         kBlockThreads, 0, ctx.stream()>>>(offsets, experts,
                                                           loads);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
