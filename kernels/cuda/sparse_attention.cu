#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
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

// One block per query row (token t, head h). Shared: score[topk], query[dqk],
// selected[topk]. Softmax as the CPU: fp32 exponentials, double normalizer.
__global__ void ForwardKernel(ConstMatrixView q, ConstMatrixView k,
                              ConstMatrixView v, const int32_t* keys, int topk,
                              int heads, float scale, MatrixView out,
                              MatrixView probs) {
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
  float* p = RowOf(probs, row);
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    score[j] = selected[j] < 0 ? 0.f : static_cast<float>(score[j] / total);
    p[j] = score[j];
  }
  __syncthreads();

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

// Radix-sort bits that cover key tokens 0..nk (nk marks a -1 slot).
int KeyBits(int64_t nk) {
  int bits = 1;
  while ((int64_t{1} << bits) <= nk) ++bits;
  return bits;
}

// Byte offsets of the backward's pieces inside its one scratch buffer.
struct ScratchPlan {
  size_t ds = 0;
  size_t offsets = 0;
  size_t sort_keys = 0;    // two buffers of nq*topk uint32
  size_t sort_values = 0;  // two buffers of nq*topk int32
  size_t temp = 0;
  size_t temp_bytes = 0;
  size_t total = 0;
};

ScratchPlan PlanScratch(int64_t nq, int64_t nk, int64_t topk, int64_t heads,
                        bool need_dk, bool need_dv) {
  ScratchPlan plan;
  auto take = [&](size_t bytes) {
    const size_t at = plan.total;
    plan.total += ScratchAlignUp(bytes);
    return at;
  };
  if (need_dk) plan.ds = take(nq * heads * topk * sizeof(float));
  if (!need_dk && !need_dv) return plan;
  const int64_t items = nq * topk;
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
  plan.temp_bytes = std::max(sort_bytes, scan_bytes);
  plan.temp = take(plan.temp_bytes);
  return plan;
}

// Builds the CSR transpose of keys [nq, topk]: the pairs t*topk + j that chose
// key token s are pairs[offsets[s] .. offsets[s+1]), ascending (radix sort is
// stable). Returns `pairs`.
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

}  // namespace

void SparseAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView k, ConstMatrixView v,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, MatrixView probs) {
  assert(q.cols == k.cols && k.rows == v.rows && k.rows % heads == 0);
  assert(out.rows == q.rows && out.cols == v.cols && probs.cols == topk);
  assert(q.rows % heads == 0 && probs.rows == q.rows && topk > 0);
  const size_t shared = (2 * topk + q.cols) * sizeof(float);
  assert(shared <= kMaxSharedBytes);
  if (q.rows == 0) return;
  ForwardKernel<<<q.rows, kThreads, shared, ctx.stream()>>>(
      q, k, v, keys, static_cast<int>(topk), static_cast<int>(heads), scale,
      out, probs);
  GLM_CUDA_CHECK_LAUNCH();
}

size_t SparseAttentionBackwardScratchBytes(int64_t nq, int64_t nk, int64_t topk,
                                           int64_t heads, bool need_dk,
                                           bool need_dv) {
  return PlanScratch(nq, nk, topk, heads, need_dk, need_dv).total;
}

void SparseAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView k, ConstMatrixView v,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, ConstMatrixView probs,
                             ConstMatrixView dout, MatrixView dq, MatrixView dk,
                             MatrixView dv) {
  assert(q.cols == k.cols && k.rows == v.rows && k.rows % heads == 0);
  assert(q.rows % heads == 0 && topk > 0);
  assert(probs.rows == q.rows && probs.cols == topk);
  assert(dout.rows == q.rows && dout.cols == v.cols);
  assert(dq.empty() || (dq.rows == q.rows && dq.cols == q.cols));
  assert(dk.empty() || (dk.rows == k.rows && dk.cols == k.cols));
  assert(dv.empty() || (dv.rows == v.rows && dv.cols == v.cols));
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  assert(nq * topk <= INT32_MAX);
  const size_t shared = (2 * topk + v.cols) * sizeof(float);
  assert(shared <= kMaxSharedBytes);
  if (q.rows == 0) return;
  const ScratchPlan plan =
      PlanScratch(nq, nk, topk, heads, !dk.empty(), !dv.empty());
  char* scratch =
      plan.total > 0 ? static_cast<char*>(ctx.Scratch(plan.total)) : nullptr;
  float* ds =
      dk.empty() ? nullptr : reinterpret_cast<float*>(scratch + plan.ds);
  cudaStream_t stream = ctx.stream();
  if (!dq.empty() || !dk.empty()) {
    QueryGradKernel<<<q.rows, kThreads, shared, stream>>>(
        k, v, keys, static_cast<int>(topk), static_cast<int>(heads), scale,
        probs, dout, dq, ds);
    GLM_CUDA_CHECK_LAUNCH();
  }
  if ((dk.empty() && dv.empty()) || k.rows == 0) return;
  int32_t* offsets = reinterpret_cast<int32_t*>(scratch + plan.offsets);
  const int32_t* pairs =
      TransposeKeys(ctx, keys, nq * topk, nk, scratch, plan, offsets);
  KeyGradKernel<<<k.rows, kThreads, 0, stream>>>(
      q, probs, dout, ds, offsets, pairs, static_cast<int>(topk),
      static_cast<int>(heads), dk, dv);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
