#include "planner/evaluation.h"

#include <algorithm>

#include "planner/attention_cap.h"

namespace glm {

const RankMemory& Evaluation::Busiest() const {
  return *std::max_element(memory.begin(), memory.end(),
                           [](const RankMemory& a, const RankMemory& b) {
                             return a.Peak() < b.Peak();
                           });
}

absl::StatusOr<Evaluation> Evaluate(const PlanJob& job, const SplitPlan& plan,
                                    const ClusterSpec& cluster,
                                    const KernelRates& rates, bool with_time) {
  Evaluation evaluation;
  evaluation.job = job;
  evaluation.plan = plan;
  if (FitsAttentionPairs(job, plan.split)) {
    absl::StatusOr<FittedAttentionPairs> fitted =
        FitAttentionPairsPerCall(job, plan, cluster.device);
    if (!fitted.ok()) return fitted.status();
    evaluation.job.attention_pairs_per_call = fitted->pairs_per_call;
    evaluation.memory = std::move(fitted->memory);
  } else {
    absl::StatusOr<std::vector<RankMemory>> memory =
        SplitMemory(job, plan, cluster.device);
    if (!memory.ok()) return memory.status();
    evaluation.memory = *std::move(memory);
  }
  if (!with_time) return evaluation;
  if (absl::Status timed = AddStepTime(cluster, rates, &evaluation);
      !timed.ok()) {
    return timed;
  }
  return evaluation;
}

absl::Status AddStepTime(const ClusterSpec& cluster, const KernelRates& rates,
                         Evaluation* evaluation) {
  absl::StatusOr<StepTime> time = PredictStepTime(
      evaluation->job, evaluation->plan, cluster, rates, evaluation->memory);
  if (!time.ok()) return time.status();
  evaluation->time = *time;
  return absl::OkStatus();
}

}  // namespace glm
