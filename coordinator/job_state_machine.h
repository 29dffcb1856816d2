// The job lifecycle: which state changes are legal.
//
//   PENDING   -> SCHEDULED | CANCELLED | FAILED
//   SCHEDULED -> RUNNING | PENDING (requeue) | FAILED | CANCELLED
//   RUNNING   -> SUCCEEDED | FAILED | CANCELLED | PENDING (restart)
//   SUCCEEDED, FAILED, CANCELLED are final.
#ifndef GLM_COORDINATOR_JOB_STATE_MACHINE_H_
#define GLM_COORDINATOR_JOB_STATE_MACHINE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job_service.pb.h"

namespace glm {

bool IsTerminalState(v1::JobState state);

// OK when `from` -> `to` is legal; otherwise FAILED_PRECONDITION naming both
// states.
absl::Status CheckTransition(v1::JobState from, v1::JobState to);

// Moves `job` to `to` and appends the change to its history; `job` is unchanged
// when the transition is illegal.
absl::Status ApplyTransition(v1::JobState to, const std::string& reason,
                             int64_t now_unix_ms, v1::Job* job);

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_STATE_MACHINE_H_
