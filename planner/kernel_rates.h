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
  // Megatron-Core's DSA kernels (--precision=bf16): sparse attention over the
  // top-k keys. Forward: FlashMLA's sparse prefill, ~640 TFLOP/s on H800
  // (published); backward: TileLang's DSA backward, 100-115 TFLOP/s
  // (published). The indexer's scoring (a [S, H*D] x [D, S] GEMM with a ReLU
  // and head sum in its epilogue, then a top-k): stated, a third of the GEMM
  // rate.
  double sparse_attention_forward = 0.65;
  double sparse_attention_backward = 0.11;
  double sparse_indexer = 0.3;
  // This trainer's kernels (its stores; bf16 mode on the CUDA backend),
  // measured on one H200 with glm5.2-mini (16 heads, 5 index layers of 32 x
  // 128, top-k 2048), one sequence a step, every layer recomputed, per token
  // of the step summed over the layers (GLM_OP_TIMES;
  // bench/results/gpu_long_context_2026-12-05_h200_latent.txt and
  // ..._2026-12-06_h200_caps.txt; planner/NOTES.md section 4d).
  //
  // Per-head attention, the queries before latent_attention_from: cuDNN's
  // flash attention over every causal key, forward and backward counted as
  // one and two forwards' multiply-adds. 16k in one call: 25.7 us a token,
  // 251 TFLOP/s.
  double per_head_attention = 0.253;
  // Its backward calls after the first (attention_pairs_per_call below the
  // causal pairs) run masked over every key up to their last query, without
  // the causal skip, and slower: 16k at 2^25 pairs a call, 34.7 us a token,
  // leaves those calls' rectangles at 163 TFLOP/s.
  double per_head_attention_later_calls = 0.164;
  // Latent attention, the queries from latent_attention_from on: each reads
  // its selected 576-wide bf16 rows once for all heads, memory-bound, a
  // fraction of the device's bandwidth. 0.95 us a query and layer forward
  // (2.48 TB/s of rows); forward, recomputed forward and backward 4.84 us at
  // 32k and 4.90 at 64k, which leaves 2.97 for the backward. The rows come
  // partly from L2: the same kernels ran 2.3-2.5 TB/s of rows on an H100 as
  // well, so on an H100 these fractions are too low.
  double latent_attention_forward = 0.517;
  double latent_attention_backward = 0.165;
  // The indexer's scores over every causal key (TF32 products of fp32
  // operands) and its top-k selection, as the scores' multiply-adds: 1.4,
  // 5.9, 11.5 and 24.2 us a token at 4k, 16k, 32k and 64k (forward and
  // recomputed forward), 111-120 TFLOP/s.
  double indexer_scores = 0.114;
  // The indexer's KL loss and its gradients, once a micro batch, in each
  // index layer. Dense (up to 8 x top-k keys) over every causal pair,
  // counted as the scores' multiply-adds: 1.7 and 6.7 us a token at 4k and
  // 16k, 49-50 TFLOP/s.
  double indexer_loss_dense = 0.0503;
  // Sparse (past 8 x top-k keys) over each query's selected keys, whose fp32
  // key rows it reads twice and adds gradients into: 10.1 us a token at 64k
  // (2.0 us a query and layer), 1.56 TB/s of those bytes, with 64-key tiles;
  // 32-key tiles (two blocks an SM) took the same step's loss from 9.8 to
  // 7.0 us a token in one call (run87, H100), 1.4x: 0.324 x 1.4.
  double indexer_loss_sparse = 0.454;
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
