#include "planner/trainer_plan_job.h"

namespace glm {

PlanJob TrainerPlanJob(const TrainerOptions& options, bool bf16,
                       RankDevice device) {
  PlanJob job;
  job.model = options.model;
  if (options.lora) {
    job.kind = TrainingKind::kLora;
    job.lora = *options.lora;
  }
  job.seq_length = options.seq_length;
  job.global_batch_size = options.global_batch_size;
  job.micro_batch_size = options.micro_batch_size;
  job.recompute =
      options.loss.recompute_layers ? Recompute::kFull : Recompute::kNone;
  job.precision = bf16 ? Precision::kFp32Bf16Copies : Precision::kFp32;
  job.device = device;
  job.distributed_optimizer = options.distributed_optimizer;
  job.overlap_grad_reduce = options.overlap_grad_reduce;
  job.latent_attention_from = options.loss.latent_attention_from;
  job.expert_chunk_tokens = options.loss.expert_chunk_tokens;
  return job;
}

}  // namespace glm
