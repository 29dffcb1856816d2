// The CUDA backend: every Backend op on one GPU, on one stream.
//
// Views, index arrays, scales and loss sums passed to it are device pointers.
// Ops are ordered on the backend's stream; only SquaredSum, which returns its
// value to the host, waits for it.
#ifndef GLM_KERNELS_CUDA_CUDA_BACKEND_H_
#define GLM_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/attention_pairs.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_context.h"

namespace glm {

struct CudaBackendOptions {
  int device = 0;
  cuda::Precision precision = cuda::Precision::kFp32;
  // Query-key pairs one cuDNN attention call takes at most; larger calls run
  // a chunk of queries at a time (kernels/cuda/cudnn_attention.h). The ops
  // harness sets it low so its cases cross chunks.
  int64_t attention_pairs_per_call = kDefaultAttentionPairsPerCall;
  // Whether the largest cuDNN attention calls may run the plan their first
  // call timed fastest (kernels/cuda/cudnn_attention.h); false keeps every
  // kernel choice a function of the shapes, so that separate processes
  // round alike (a job's training.deterministic).
  bool time_attention_plans = true;
  // Whether the largest matrix products that write their output may run the
  // cuBLASLt algorithm their first call timed fastest (kernels/cuda/linear.cu);
  // false keeps the heuristic's first choice (a job's training.deterministic).
  bool time_product_algorithms = false;
  // Whether ops may sum with atomics, in an order that varies between runs
  // (the latent attention's key gradient: kernels/cuda/latent_attention.cuh;
  // the sparse indexer loss's: kernels/cuda/indexer_sparse_loss.cuh); false
  // keeps every sum in a fixed order: the latent attention's backward runs
  // the per-head form and the indexer loss its sorted per-query path (a
  // job's training.deterministic).
  bool atomic_sums = true;
  // Whether the bf16 mode's indexer loss may take its sparse path (with
  // atomic_sums) where each query selects fewer than one in 8 of the keys
  // (kernels/cuda/indexer_sparse_loss.cuh; checked against the CPU on an
  // H200, run84). GLM_SPARSE_INDEXER_LOSS=0 keeps the sorted per-query path.
  bool sparse_indexer_loss = true;
  // Whether the latent attention's forward splits its scores by the query's
  // columns instead of the tile's keys (kernels/cuda/latent_attention.cuh):
  // an experiment until the latent bench has timed both in one call
  // (GLM_LATENT_SCORES_BY_COLUMNS=1 for workers and benches; the ops
  // harness's --latent-scores-by-columns).
  bool latent_scores_by_columns = false;
};

// Fails with a message naming the device when it does not exist.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(
    const CudaBackendOptions& options);

}  // namespace glm

#endif  // GLM_KERNELS_CUDA_CUDA_BACKEND_H_
