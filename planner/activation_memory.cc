#include "planner/activation_memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace glm {

TokenShare TokenShareOf(const PlanJob& job, const Split& split) {
  const ModelConfig& m = job.model;
  TokenShare share;
  share.all = job.tokens_per_micro_batch();
  share.chunk = share.all / split.cp;
  share.local = share.chunk / split.tp;
  share.topk = std::min(m.index_topk, job.seq_length);
  // Each rank routes local * top_k rows. With every expert local that is
  // its load; under expert parallelism the busiest rank receives the
  // imbalance times the mean.
  const double imbalance = split.ep > 1 ? job.routing_imbalance : 1.0;
  share.routed = static_cast<int64_t>(
      static_cast<double>(share.local * m.num_experts_per_tok) * imbalance);
  return share;
}

int64_t TotalBytes(const std::vector<MemoryTerm>& terms) {
  int64_t total = 0;
  for (const MemoryTerm& term : terms) total += term.bytes;
  return total;
}

int64_t DeviceBytes(const std::vector<MemoryTerm>& terms) {
  int64_t total = 0;
  for (const MemoryTerm& term : terms) {
    if (!term.host) total += term.bytes;
  }
  return total;
}

int64_t RankBytes(const std::vector<MemoryTerm>& terms, RankDevice device) {
  return device == RankDevice::kCpu ? TotalBytes(terms) : DeviceBytes(terms);
}

bool RunsAsOneModel(const Split& split) {
  return split.pp == 1 && split.tp == 1 && split.cp == 1;
}

absl::StatusOr<StageActivationBytes> StageActivationMemory(
    const PlanJob& job, const Split& split, const StageSlice& stage) {
  if (IsTrainerStore(job.precision)) {
    // training.recomputeActivations: whole layers, one model per rank.
    if (job.recompute == Recompute::kSelective) {
      return absl::InvalidArgumentError(
          absl::StrCat("--recompute=selective: this trainer (--precision=",
                       PrecisionName(job.precision),
                       ") recomputes whole layers only (--recompute=full)"));
    }
    if (job.recompute == Recompute::kFull &&
        (!RunsAsOneModel(split) || split.ep > 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--recompute=full: this trainer (--precision=",
                       PrecisionName(job.precision),
                       ") recomputes layers only with tp, cp, pp and ep 1"));
    }
    return Fp32StageActivations(job, split, stage);
  }
  return Bf16StageActivations(job, split, stage);
}

}  // namespace glm
