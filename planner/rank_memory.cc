#include "planner/rank_memory.h"

#include "planner/gradient_exchange.h"

namespace glm {
namespace {

constexpr int64_t kFp32Bytes = 4;

// A stage's memory per micro batch, with what this trainer's pipeline
// schedule holds of it after each pass: the output it sends on (not from
// the last stage) and the input gradient it sends back (not from the first).
ChunkMemory ChunkOf(const PlanJob& job, const SplitPlan& plan,
                    const StageSlice& stage, const StageActivationBytes& acts) {
  ChunkMemory chunk;
  chunk.saved = acts.saved_bytes();
  chunk.transient = acts.transient_bytes();
  if (IsTrainerStore(job.precision) && plan.split.pp > 1) {
    const int64_t hidden = TokenShareOf(job, plan.split).local *
                           job.model.hidden_size * kFp32Bytes;
    if (!stage.has_loss) chunk.sent_forward = hidden;
    if (!stage.has_embedding) chunk.sent_backward = hidden;
  }
  return chunk;
}

const RankCoordinates& FirstRankOf(const SplitPlan& plan, int pp_rank) {
  for (const RankCoordinates& c : plan.grid.ranks) {
    if (c.pp == pp_rank) return c;
  }
  return plan.grid.ranks.front();
}

}  // namespace

absl::StatusOr<RankMemory> PipelineRankMemory(const PlanJob& job,
                                              const SplitPlan& plan,
                                              const DeviceSpec& device,
                                              int pp_rank) {
  RankMemory memory;
  memory.pp_rank = pp_rank;
  memory.state = PipelineRankStateBytes(job, plan, pp_rank);
  std::vector<ChunkMemory> chunks;
  int64_t kept = 0;
  for (const StageSlice& stage : plan.StagesOf(pp_rank)) {
    absl::StatusOr<StageActivationBytes> acts =
        StageActivationMemory(job, plan.split, stage);
    if (!acts.ok()) return acts.status();
    if (chunks.empty()) memory.first_stage = *acts;
    chunks.push_back(ChunkOf(job, plan, stage, *acts));
    kept += acts->kept_after_backward;
    memory.scratch = std::max(memory.scratch, acts->scratch_bytes());
  }
  const int64_t micro_batches = plan.micro_batches_per_rank(job);
  if (plan.split.pp == 1) {
    // One stage, one micro batch at a time.
    memory.schedule = {chunks[0].saved, chunks[0].transient, 0, 1};
  } else {
    absl::StatusOr<SchedulePeak> peak =
        PipelineSchedulePeak(plan.split.pp, pp_rank, chunks, micro_batches);
    if (!peak.ok()) return peak.status();
    memory.schedule = *peak;
  }
  memory.exchange =
      GradientExchangeBytes(job, plan, FirstRankOf(plan, pp_rank));
  memory.retained = kept;
  memory.runtime = device.runtime_bytes;
  memory.slack = static_cast<int64_t>(
      device.allocator_slack * static_cast<double>(memory.Activations()));
  return memory;
}

absl::StatusOr<std::vector<RankMemory>> SplitMemory(const PlanJob& job,
                                                    const SplitPlan& plan,
                                                    const DeviceSpec& device) {
  std::vector<RankMemory> ranks;
  for (int pp_rank = 0; pp_rank < plan.split.pp; ++pp_rank) {
    absl::StatusOr<RankMemory> memory =
        PipelineRankMemory(job, plan, device, pp_rank);
    if (!memory.ok()) return memory.status();
    ranks.push_back(*std::move(memory));
  }
  return ranks;
}

}  // namespace glm
