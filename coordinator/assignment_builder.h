// What each rank of a job attempt is told: the spec, its rank, and where to
// meet its peers. The rank plans its coordinates and stages from the spec
// with the same rules (jobspec) the coordinator validated it by.
#ifndef GLM_COORDINATOR_ASSIGNMENT_BUILDER_H_
#define GLM_COORDINATOR_ASSIGNMENT_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "jobspec/job_spec_validator.h"
#include "proto/job_service.pb.h"
#include "proto/worker_service.pb.h"

namespace glm {

// "<job_id>/attempt-<n>": rendezvous keys of one attempt never meet another's.
std::string RendezvousScope(const std::string& job_id, int attempt);

// One assignment per rank, in rank order.
std::vector<v1::Assignment> BuildAssignments(const v1::Job& job,
                                             const JobPlan& plan, int attempt,
                                             int64_t rendezvous_timeout_ms);

}  // namespace glm

#endif  // GLM_COORDINATOR_ASSIGNMENT_BUILDER_H_
