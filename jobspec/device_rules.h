// Which workers may run a job: the job's `device` ("cpu" or "cuda") must be
// the kind of the worker's device ("cpu", or "cuda:N" for GPU N). The
// coordinator refuses at submission a job that no registered worker can run;
// glm-worker checks its own device before it starts a rank.
#ifndef GLM_JOBSPEC_DEVICE_RULES_H_
#define GLM_JOBSPEC_DEVICE_RULES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_spec_validator.h"
#include "proto/job_spec.pb.h"
#include "proto/worker_service.pb.h"

namespace glm {

// The kind of worker that runs a spec whose device is valid.
v1::DeviceKind DeviceKindOf(const v1::JobSpec& spec);

// The kind of a worker's device as glm-worker names it ("cpu", "cuda:N");
// INVALID_ARGUMENT for any other name.
absl::StatusOr<v1::DeviceKind> WorkerDeviceKind(const std::string& device);

// A worker's final check before it runs a rank of `spec` on `device`: the
// spec's plan when the spec is valid (ValidateJobSpec) and asks for this
// worker's kind of device; INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<JobPlan> ValidateForWorker(const v1::JobSpec& spec,
                                          const std::string& device);

// At submission: OK when a worker of one of the `registered` kinds (one entry
// per live worker) runs `spec`; FAILED_PRECONDITION naming "device"
// otherwise.
absl::Status CheckSomeWorkerRuns(const v1::JobSpec& spec,
                                 const std::vector<v1::DeviceKind>& registered);

}  // namespace glm

#endif  // GLM_JOBSPEC_DEVICE_RULES_H_
