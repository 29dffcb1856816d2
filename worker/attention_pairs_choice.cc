#include "worker/attention_pairs_choice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "jobspec/job_spec_validator.h"
#include "kernels/attention_pairs.h"
#include "planner/attention_cap.h"
#include "planner/hardware.h"
#include "planner/split.h"
#include "planner/trainer_plan_job.h"

namespace glm {
namespace {

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
}

// The spec's split of the model over ranks.
Split SplitOf(const v1::ParallelSpec& parallel) {
  Split split;
  split.tp = ParallelSize(parallel.tp());
  split.pp = ParallelSize(parallel.pp());
  split.cp = ParallelSize(parallel.cp());
  split.ep = ParallelSize(parallel.ep());
  return split;
}

// The planner's H100 device (its runtime bytes and allocator slack) with
// this GPU's name and memory.
absl::StatusOr<DeviceSpec> DeviceSpecOf(const DeviceDescription& device) {
  absl::StatusOr<ClusterSpec> gpu = ClusterPreset("h100");
  if (!gpu.ok()) return gpu.status();
  DeviceSpec spec = gpu->device;
  spec.name = device.name;
  spec.memory_bytes = device.memory_bytes;
  return spec;
}

// The planner's fit of `job` split as `split` over `world` ranks to `device`.
absl::StatusOr<FittedAttentionPairs> FitToDevice(
    const PlanJob& job, int world, const Split& split,
    const DeviceDescription& device) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<DeviceSpec> device_spec = DeviceSpecOf(device);
  if (!device_spec.ok()) return device_spec.status();
  return FitAttentionPairsPerCall(job, *plan, *device_spec);
}

}  // namespace

absl::StatusOr<AttentionPairsChoice> ChooseAttentionPairsPerCall(
    const v1::JobSpec& spec, const TrainerOptions& options,
    const DeviceDescription& device) {
  // 0: unset (a set value is at least 1).
  absl::StatusOr<int64_t> set = AttentionPairsPerCall(0);
  if (!set.ok()) return set.status();
  if (*set > 0) return AttentionPairsChoice{*set, ""};
  const AttentionPairsChoice standing{kDefaultAttentionPairsPerCall, ""};
  PlanJob job =
      TrainerPlanJob(options, spec.precision() != "fp32", RankDevice::kGpu);
  job.fit_attention_pairs = true;
  const Split split = SplitOf(spec.parallel());
  if (device.memory_bytes == 0 || !FitsAttentionPairs(job, split)) {
    return standing;
  }
  absl::StatusOr<FittedAttentionPairs> fitted = FitToDevice(
      job, ParallelSize(spec.parallel().world_size()), split, device);
  if (!fitted.ok()) {
    return AttentionPairsChoice{
        kDefaultAttentionPairsPerCall,
        absl::StrCat("attention: the default query-key pairs a call (the "
                     "planner could not model this job: ",
                     fitted.status().message(), ")")};
  }
  if (fitted->fits && fitted->pairs_per_call == kDefaultAttentionPairsPerCall) {
    return standing;
  }
  const std::string memory =
      absl::StrCat(device.name, "'s ", GiB(device.memory_bytes));
  if (!fitted->fits) {
    return AttentionPairsChoice{
        fitted->pairs_per_call,
        absl::StrCat("attention: ", fitted->pairs_per_call,
                     " query-key pairs a call, the fewest tried; glmctl plan "
                     "predicts ",
                     GiB(fitted->PeakBytes()), " at it, over ", memory,
                     ": the job may run out of memory (more devices or a "
                     "shorter sequence)")};
  }
  return AttentionPairsChoice{
      fitted->pairs_per_call,
      absl::StrCat("attention: ", fitted->pairs_per_call,
                   " query-key pairs a call (GLM_ATTENTION_PAIRS_PER_CALL "
                   "unset): glmctl plan predicts ",
                   GiB(fitted->PeakBytes()), " of ", memory, " at it, ",
                   GiB(fitted->job_peak_bytes), " at the default ",
                   kDefaultAttentionPairsPerCall)};
}

}  // namespace glm
