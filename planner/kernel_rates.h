// How fast kernels and links run, as fractions of the device's and links'
// peaks. Each default says where it comes from: measured on this project's
// H200s (bench/NOTES.md, DESIGN.md section 9), or stated from published
// kernels where we have none of our own yet.
#ifndef GLM_PLANNER_KERNEL_RATES_H_
#define GLM_PLANNER_KERNEL_RATES_H_

namespace glm {

struct KernelRates {
  // Dense GEMMs (projections, dense MLP, shared experts, router, logits):
  // cuBLASLt at glm5.2-mini's shapes on the H200 ran o_proj and the MLP at
  // 530-740 TFLOP/s of 989 (measured).
  double gemm = 0.65;
  // Routed experts: a CUTLASS sm90 grouped GEMM reached 640-690 TFLOP/s at
  // these shapes on the H200 (measured through torch).
  double grouped_gemm = 0.67;
  // Sparse attention over the top-k keys. Forward: FlashMLA's sparse
  // prefill, ~640 TFLOP/s on H800 (published); backward: TileLang's DSA
  // backward, 100-115 TFLOP/s (published).
  double attention_forward = 0.65;
  double attention_backward = 0.11;
  // The DSA indexer's scoring (a [S, H*D] x [D, S] GEMM with a ReLU and head
  // sum in its epilogue, then a top-k): stated, a third of the GEMM rate.
  double indexer = 0.3;
  // Memory-bound work (norms, RoPE, SwiGLU, permutes, the optimizer):
  // stated fraction of the device's bandwidth.
  double memory = 0.8;
  // Collectives over the fast link: NCCL's all-reduce bus bandwidth of 292
  // GB/s of 450 over NVLink between two H200s (measured, bench/NOTES.md).
  double fast_link = 0.65;
  // Over the network: stated, NCCL over 400 Gb/s InfiniBand.
  double network = 0.8;
  // Share of the data-parallel gradient reduce-scatter and weight
  // all-gather hidden behind compute. Megatron overlaps them with backward
  // and forward (stated); this trainer runs them after the micro batches.
  double megatron_dp_overlap = 0.8;
};

}  // namespace glm

#endif  // GLM_PLANNER_KERNEL_RATES_H_
