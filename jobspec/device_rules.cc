#include "jobspec/device_rules.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/field_error.h"

namespace glm {

v1::DeviceKind DeviceKindOf(const v1::JobSpec& spec) {
  return spec.device() == "cuda" ? v1::CUDA : v1::CPU;
}

absl::StatusOr<v1::DeviceKind> WorkerDeviceKind(const std::string& device) {
  if (device == "cpu") return v1::CPU;
  if (absl::StartsWith(device, "cuda:")) return v1::CUDA;
  return absl::InvalidArgumentError(
      absl::StrCat("a worker's device is cpu or cuda:N, got '", device, "'"));
}

absl::StatusOr<JobPlan> ValidateForWorker(const v1::JobSpec& spec,
                                          const std::string& device) {
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<v1::DeviceKind> kind = WorkerDeviceKind(device);
  if (!kind.ok()) return kind.status();
  if (*kind != DeviceKindOf(spec)) {
    return FieldError("device", absl::StrCat("the job asks for ", spec.device(),
                                             ", this worker runs on ", device));
  }
  return plan;
}

absl::Status CheckSomeWorkerRuns(
    const v1::JobSpec& spec, const std::vector<v1::DeviceKind>& registered) {
  const v1::DeviceKind wanted = DeviceKindOf(spec);
  if (std::count(registered.begin(), registered.end(), wanted) > 0) {
    return absl::OkStatus();
  }
  const auto cpu = std::count(registered.begin(), registered.end(), v1::CPU);
  return absl::FailedPreconditionError(absl::StrCat(
      "device: no registered worker runs ", spec.device(), " jobs (",
      registered.size(), " registered: ", cpu, " cpu, ",
      registered.size() - cpu, " cuda); start glm-worker --device=",
      wanted == v1::CUDA ? "cuda:N" : "cpu", " first"));
}

}  // namespace glm
