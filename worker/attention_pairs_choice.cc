#include "worker/attention_pairs_choice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/environment.h"
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

bool OneModelPerRank(const v1::ParallelSpec& parallel) {
  return ParallelSize(parallel.tp()) == 1 && ParallelSize(parallel.pp()) == 1 &&
         ParallelSize(parallel.cp()) == 1 && ParallelSize(parallel.ep()) == 1;
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

// The planner's fit of `job` on `world` ranks of one model each to `device`.
absl::StatusOr<FittedAttentionPairs> FitToDevice(
    const PlanJob& job, int world, const DeviceDescription& device) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, Split{});
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
  absl::StatusOr<int64_t> set =
      EnvironmentWholeNumber("GLM_ATTENTION_PAIRS_PER_CALL", 1, 0);
  if (!set.ok()) return set.status();
  if (*set > 0) return AttentionPairsChoice{*set, ""};
  const AttentionPairsChoice standing{kDefaultAttentionPairsPerCall, ""};
  if (device.memory_bytes == 0 || !OneModelPerRank(spec.parallel())) {
    return standing;
  }
  absl::StatusOr<FittedAttentionPairs> fitted = FitToDevice(
      TrainerPlanJob(options, spec.precision() != "fp32", RankDevice::kGpu),
      ParallelSize(spec.parallel().world_size()), device);
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
                     GiB(fitted->peak_bytes), " at it, over ", memory,
                     ": the job may run out of memory (more devices or a "
                     "shorter sequence)")};
  }
  return AttentionPairsChoice{
      fitted->pairs_per_call,
      absl::StrCat("attention: ", fitted->pairs_per_call,
                   " query-key pairs a call (GLM_ATTENTION_PAIRS_PER_CALL "
                   "unset): glmctl plan predicts ",
                   GiB(fitted->peak_bytes), " of ", memory, " at it, ",
                   GiB(fitted->job_peak_bytes), " at the default ",
                   kDefaultAttentionPairsPerCall)};
}

}  // namespace glm
