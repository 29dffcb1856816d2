// What a plan is made for besides the cluster: the model, how it trains
// (pretraining, full fine-tuning or LoRA), the batch, what is recomputed and
// how tensors are stored.
#ifndef GLM_PLANNER_PLAN_JOB_H_
#define GLM_PLANNER_PLAN_JOB_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention_pairs.h"
#include "model/config.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "training/lora.h"

namespace glm {

enum class TrainingKind { kPretrain, kSft, kLora };

// What backward recomputes instead of keeping from forward.
enum class Recompute {
  kNone,
  // Megatron's recompute_modules layernorm, mla_up_proj and moe_act: norm
  // outputs, the MLA up-projections and SwiGLU outputs are recomputed (cheap
  // to redo, large to keep).
  kSelective,
  // Every decoder layer keeps only its input and runs its forward again
  // during backward (Megatron's recompute_granularity=full, method uniform,
  // one layer per group).
  kFull,
};

// How tensors are stored and which activations are kept.
enum class Precision {
  // This trainer's store: every tensor fp32, activations as model/*.h keep
  // them (attention probabilities over the top-k keys). Its CPU ranks, and
  // its CUDA ranks with a job's precision "fp32".
  kFp32,
  // This trainer's CUDA bf16 mode (a job's precision "bf16" on "cuda", the
  // default there): the fp32 store plus one bf16 copy of every held product
  // weight (model/weight_copies.h: everything but the embedding and the
  // norms) in one allocation, which products read; the activations of
  // Backend::ActivationType() in bf16.
  kFp32Bf16Copies,
  // Megatron-Core's and DESIGN.md section 9's mixed precision: bf16 weights
  // and activations, fp32 gradients, master weights and AdamW moments;
  // attention keeps its log-sum-exp, not probabilities.
  kBf16Mixed,
};

// Where this trainer's ranks run, which decides where its kernels keep their
// temporaries: the CPU backend in host vectors, part of a rank's memory; the
// CUDA backend in two grow-only device scratch buffers
// (kernels/cuda/cuda_context.h), held at the largest size an op asked.
enum class RankDevice { kCpu, kGpu };

// Whether `precision` is one of this trainer's stores (fp32 tensors, its
// activations, recomputation and gradient exchanges), not Megatron-Core's.
inline bool IsTrainerStore(Precision precision) {
  return precision != Precision::kBf16Mixed;
}

struct PlanJob {
  ModelConfig model;
  TrainingKind kind = TrainingKind::kPretrain;
  // Read when kind is kLora. The default targets are the five MLA
  // projections of every decoder layer: 395 targets (790 adapter tensors)
  // for GLM-5.2 with its MTP layer, as the seeds' LoRA checkpoint holds.
  LoraOptions lora = {
      8,
      16,
      {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}};
  int64_t seq_length = 4096;
  int64_t global_batch_size = 1;
  int64_t micro_batch_size = 1;
  Recompute recompute = Recompute::kNone;
  Precision precision = Precision::kBf16Mixed;
  // This trainer's stores only (kFp32Bf16Copies runs on kGpu alone).
  RankDevice device = RankDevice::kGpu;
  // ZeRO-1 over the data-parallel ranks.
  bool distributed_optimizer = true;
  // This trainer's overlapGradReduce: the data-parallel sums run during the
  // last micro batch's backward. Splits of data parallelism alone take it
  // (tp, cp, pp and ep 1); the others sum after the micro batches.
  bool overlap_grad_reduce = false;
  // Tokens the busiest expert rank receives over the mean (1: balanced).
  double routing_imbalance = 1.0;
  // Tokens whose logits exist at once (0: the micro batch's, in one piece).
  int64_t logits_chunk_tokens = 0;
  // This trainer's micro batch queries from this token on attend in MLA's
  // latent form (AttentionSpec::latent_from, model/mla_attention.h; a
  // worker's GLM_LATENT_ATTENTION_FROM; 0: never).
  int64_t latent_attention_from = kDefaultLatentAttentionFrom;
  // Query-key pairs a GPU rank's cuDNN attention call takes at most
  // (kernels/attention_pairs.h; a worker's GLM_ATTENTION_PAIRS_PER_CALL):
  // the chunk its backward's scratch is sized by.
  int64_t attention_pairs_per_call = kDefaultAttentionPairsPerCall;
  // As a GPU worker does where GLM_ATTENTION_PAIRS_PER_CALL is unset: in this
  // trainer's store on GPUs, a split of one model per rank (tp, pp, cp and
  // ep 1) runs the largest halving of attention_pairs_per_call its busiest
  // rank fits the device at (planner/attention_cap.h; Evaluate).
  bool fit_attention_pairs = false;
  // A micro batch of more tokens than this runs its routed experts (in this
  // process, without expert parallelism) a chunk of this many tokens at a
  // time, and under recomputation forms each chunk's expert rows again in
  // its backward (LossOptions::expert_chunk_tokens, ExpertChunking in
  // model/moe.h; 0: never).
  int64_t expert_chunk_tokens = kDefaultExpertChunkTokens;

  int64_t micro_batches() const { return global_batch_size / micro_batch_size; }
  int64_t tokens_per_micro_batch() const {
    return seq_length * micro_batch_size;
  }
};

// InvalidArgument naming the flag at fault.
absl::Status ValidatePlanJob(const PlanJob& job);

absl::StatusOr<TrainingKind> ParseTrainingKind(const std::string& name);
absl::StatusOr<Recompute> ParseRecompute(const std::string& name);
absl::StatusOr<Precision> ParsePrecision(const std::string& name);
const char* TrainingKindName(TrainingKind kind);
const char* RecomputeName(Recompute recompute);
const char* PrecisionName(Precision precision);

// Bytes of one stored element of a weight or activation (gradients, master
// weights and moments are fp32 in every store).
inline int64_t ElementBytes(Precision precision) {
  return IsTrainerStore(precision) ? 4 : 2;
}

}  // namespace glm

#endif  // GLM_PLANNER_PLAN_JOB_H_
