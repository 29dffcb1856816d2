// The bf16 mode's attention core through cuDNN's fused SDPA (flash attention
// on Hopper's tensor cores, fp32 softmax statistics), with DSA's top-k
// selection as an additive mask over dense tiles. At 4k tokens with top-2048
// the masked tiles are only ~1.3x the selected pairs, and cuDNN's kernels run
// two orders of magnitude faster than gathering rows per query; sparser
// selections (long sequences) stay with kernels/cuda/sparse_attention.cuh.
//
// Semantics are Backend::SparseAttentionForward / Backward's (kernels/
// backend.h); F32 operands go to bf16 copies and F32 results come back from
// them, BF16 ones (the activation type) are read and written where they lie.
#ifndef GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/tensor.h"

namespace glm::cuda {

class CudnnAttention {
 public:
  // Ops run on ctx's stream; max_pairs_per_call: see Forward. time_plans:
  // the largest calls time every plan cuDNN lists on their first call and
  // keep the fastest (a choice that may differ between processes, and with
  // it the rounding); else every call runs cuDNN's first choice, a function
  // of the shapes, the cuDNN version and the GPU.
  CudnnAttention(cudaStream_t stream, int64_t max_pairs_per_call,
                 bool time_plans);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether a call with these shapes runs here: head dims cuDNN's Hopper
  // kernels take (multiples of 16 up to 256) and a plan cuDNN can build for
  // each of the call's query chunks (checked once per shape and remembered).
  // The masked kernels pay for every causal key, not only the selected ones;
  // past one key in 8 selected (sequences over 16k with DSA's top-2048) that
  // is still far faster than the gather kernels, which ran a 16k layer's
  // forward in 336 ms (bench/NOTES.md, 2026-12-02).
  bool Supports(ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
                int64_t topk, int64_t full_queries, int64_t heads, float scale,
                bool backward);

  // Require Supports(...) for the call's shapes. A call of more than
  // max_pairs_per_call query-key pairs runs as several, a chunk of queries
  // each (over the keys they can see: a prefix in self-attention), because
  // the mask and the deterministic backward's workspace (about 38 bytes a
  // pair) grow with the pairs (CudaBackendOptions' default, 2^28 pairs, is
  // one 16k self-attention). The forward's full queries (Backend's
  // full_queries) run without the mask through cuDNN's plain causal kernels,
  // faster per tile than the masked ones (bench/NOTES.md, 2026-12-02); the
  // backward runs them masked (CallChunks says why).
  void Forward(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
               ConstMatrixView v, const int32_t* keys, int64_t topk,
               int64_t full_queries, int64_t heads, float scale, MatrixView out,
               float* lse);
  void Backward(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                ConstMatrixView v, const int32_t* keys, int64_t topk,
                int64_t full_queries, int64_t heads, float scale,
                ConstMatrixView out, const float* lse, ConstMatrixView dout,
                MatrixView dq, MatrixView dk, MatrixView dv);

 private:
  // nq, nk, heads, dqk, dv, v_stride, scale, backward, masked, causal.
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           float, bool, bool, bool>;
  struct Plan;
  // What a plan needs of a call beyond its chunk: heads, head dims, the
  // elements between v's rows as the plan reads them, and the scale.
  struct HeadDims {
    int64_t heads, qk, v, v_stride;
    float scale;
  };
  static HeadDims DimsOf(ConstMatrixView q, ConstMatrixView v, int64_t heads,
                         float scale);

  // The shape's plan, built on first use; null when cuDNN has none.
  Plan* PlanFor(const Shape& shape);
  // One call's work on queries [q0, q1) over keys [0, k_end), with the
  // selection's mask or (full queries) without; causal: self-attention's
  // queries, token q0 + i seeing keys <= q0 + i.
  struct Chunk {
    int64_t q0, q1, k_end;
    bool masked, causal;
  };
  std::vector<Chunk> Chunks(int64_t nq, int64_t nk, int64_t full_queries) const;
  std::vector<Chunk> CallChunks(int64_t nq, int64_t nk, int64_t full_queries,
                                const HeadDims& d, bool backward);
  Plan* PlanOf(const Chunk& c, const HeadDims& d, bool backward);
  void ForwardChunk(CudaContext& ctx, Plan& plan, ConstMatrixView q,
                    ConstMatrixView k, ConstMatrixView v, const int32_t* keys,
                    int64_t topk, int64_t heads, MatrixView out, float* lse);
  // Writes dq; adds into dk and dv when add_keys, else writes them.
  void BackwardChunk(CudaContext& ctx, Plan& plan, ConstMatrixView q,
                     ConstMatrixView k, ConstMatrixView v, const int32_t* keys,
                     int64_t topk, int64_t heads, ConstMatrixView out,
                     const float* lse, ConstMatrixView dout, MatrixView dq,
                     MatrixView dk, MatrixView dv, bool add_keys);

  cudnnHandle_t handle_ = nullptr;
  int64_t max_pairs_per_call_;
  bool time_plans_;
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CUDNN_ATTENTION_H_
