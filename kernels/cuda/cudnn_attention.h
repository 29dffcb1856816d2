// The bf16 mode's attention core through cuDNN's fused SDPA (flash attention
// on Hopper's tensor cores, fp32 softmax statistics), with DSA's top-k
// selection as an additive mask over dense tiles. At 4k tokens with top-2048
// the masked tiles are only ~1.3x the selected pairs, and cuDNN's kernels run
// two orders of magnitude faster than gathering rows per query; sparser
// selections (long sequences) stay with kernels/cuda/sparse_attention.cuh.
//
// Semantics are Backend::SparseAttentionForward / Backward's (kernels/
// backend.h); operands go to bf16 copies, results come back to fp32 views.
#ifndef GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

class CudnnAttention {
 public:
  // Ops run on ctx's stream.
  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether a call with these shapes runs here: a selection mask of at most
  // kMaxBiasBytes, head dims cuDNN's Hopper kernels take (multiples of 16 up
  // to 256), and a plan cuDNN can build (checked once per shape and
  // remembered). The masked kernels pay for every causal key, not only the
  // selected ones; past one key in 8 selected (sequences over 16k with DSA's
  // top-2048) that is still far faster than the gather kernels, which ran a
  // 16k layer's forward in 336 ms (bench/NOTES.md, 2026-12-02).
  static constexpr int64_t kMaxBiasBytes = int64_t{8} << 30;
  bool Supports(int64_t nq, int64_t nk, int64_t topk, int64_t heads,
                int64_t dqk, int64_t dv, float scale, bool backward);

  // Require Supports(...) for the call's shapes.
  void Forward(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
               ConstMatrixView v, const int32_t* keys, int64_t topk,
               int64_t heads, float scale, MatrixView out, float* lse);
  void Backward(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                ConstMatrixView v, const int32_t* keys, int64_t topk,
                int64_t heads, float scale, ConstMatrixView out,
                const float* lse, ConstMatrixView dout, MatrixView dq,
                MatrixView dk, MatrixView dv);

 private:
  // nq, nk, heads, dqk, dv, scale, backward.
  using Shape =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, bool>;
  struct Plan;

  // The shape's plan, built on first use; null when cuDNN has none.
  Plan* PlanFor(const Shape& shape);

  cudnnHandle_t handle_ = nullptr;
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_
