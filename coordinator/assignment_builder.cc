#include "coordinator/assignment_builder.h"

#include "absl/strings/str_cat.h"

namespace glm {

std::string RendezvousScope(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/attempt-", attempt);
}

std::vector<v1::Assignment> BuildAssignments(const v1::Job& job,
                                             const JobPlan& plan, int attempt,
                                             int64_t rendezvous_timeout_ms) {
  std::vector<v1::Assignment> assignments;
  for (const RankCoordinates& rank : plan.grid.ranks) {
    v1::Assignment assignment;
    assignment.set_job_id(job.id());
    assignment.set_attempt(attempt);
    *assignment.mutable_spec() = job.spec();
    assignment.set_rank(rank.rank);
    assignment.set_world_size(static_cast<int>(plan.grid.ranks.size()));
    assignment.mutable_rendezvous()->set_scope(
        RendezvousScope(job.id(), attempt));
    assignment.mutable_rendezvous()->set_timeout_ms(rendezvous_timeout_ms);
    assignments.push_back(std::move(assignment));
  }
  return assignments;
}

}  // namespace glm
