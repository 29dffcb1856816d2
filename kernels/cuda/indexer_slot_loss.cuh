// The indexer's KL loss over one query's selected slots, shared by the loss
// kernels (kernels/cuda/indexer.cu's and indexer_sparse_loss.cu's): each
// forms its query's slot scores its own way, then hands them to SlotLoss.
#ifndef GLM_KERNELS_CUDA_INDEXER_SLOT_LOSS_CUH_
#define GLM_KERNELS_CUDA_INDEXER_SLOT_LOSS_CUH_

#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/device_math.cuh"
#include "kernels/tensor.h"

namespace glm::cuda {

constexpr int kKlThreads = 256;

// IndexerKlLoss's operands, as every loss kernel takes them; grad_scale is
// coeff / n, the factor of each query's gradients.
struct KlProblem {
  ConstMatrixView iq, ik, w, target;  // target [n, topk]
  const int32_t* keys;                // [n, topk]
  int topk, heads;
  float scale, grad_scale;
};

// Reduces `value` over the block with `op`; every thread gets the result.
// CUB's block reduction has a fixed tree, so the result is deterministic.
template <typename Op>
__device__ double BlockAllReduce(double value, Op op) {
  using Reduce = cub::BlockReduce<double, kKlThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ double result;
  const double total = Reduce(storage).Reduce(value, op);
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  const double broadcast = result;
  __syncthreads();  // the next call reuses storage and result
  return broadcast;
}

struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Query t's loss from its selected slots' scores z[j] (published to the
// block): writes row_loss[t] and replaces each z[j] by grad_scale * d KL /
// d z_j. target: topk floats of shared memory (the fp32 targets, widened
// where they are used). Ends with a barrier.
__device__ inline void SlotLoss(const KlProblem& p, int64_t t,
                                const int32_t* selected, float* target,
                                float* z, double* row_loss) {
  double max = -INFINITY, mass = 0;
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    if (selected[j] < 0) continue;
    target[j] = At(p.target, t, j);
    max = fmax(max, static_cast<double>(z[j]));
    mass += target[j];
  }
  max = BlockAllReduce(max, MaxOp());
  mass = BlockAllReduce(mass, SumOp());
  double sum = 0;
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    if (selected[j] >= 0) sum += exp(z[j] - max);
  }
  const double log_sum = max + log(BlockAllReduce(sum, SumOp()));
  double loss = 0;
  for (int j = threadIdx.x; j < p.topk; j += kKlThreads) {
    if (selected[j] < 0) continue;
    const double log_p = z[j] - log_sum;
    const double q = static_cast<double>(target[j]) / mass;
    if (q > 0) loss += q * (log(q) - log_p);
    // d KL / d z_j = p_j - q_j (q sums to one); z[j] now holds it, scaled.
    z[j] = p.grad_scale * static_cast<float>(exp(log_p) - q);
  }
  loss = BlockAllReduce(loss, SumOp());  // its barrier publishes z
  if (threadIdx.x == 0) row_loss[t] = loss;
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_INDEXER_SLOT_LOSS_CUH_
