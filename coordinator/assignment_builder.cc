#include "coordinator/assignment_builder.h"

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

v1::GridCoordinates CoordinatesOf(const RankCoordinates& rank) {
  v1::GridCoordinates coordinates;
  coordinates.set_tp(rank.tp);
  coordinates.set_cp(rank.cp);
  coordinates.set_ep(rank.ep);
  coordinates.set_dp(rank.dp);
  coordinates.set_pp(rank.pp);
  coordinates.set_etp(rank.etp);
  coordinates.set_edp(rank.edp);
  return coordinates;
}

v1::StageSlice SliceOf(const StageSlice& stage) {
  v1::StageSlice slice;
  slice.set_stage(stage.stage);
  slice.set_pp_rank(stage.pp_rank);
  slice.set_virtual_chunk(stage.virtual_chunk);
  slice.set_first_layer(stage.first_layer);
  slice.set_last_layer(stage.last_layer);
  slice.set_has_embedding(stage.has_embedding);
  slice.set_has_loss(stage.has_loss);
  slice.set_mtp_layers(stage.mtp_layers);
  return slice;
}

}  // namespace

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
    *assignment.mutable_coordinates() = CoordinatesOf(rank);
    for (const StageSlice& stage : plan.stages) {
      if (stage.pp_rank == rank.pp) *assignment.add_stages() = SliceOf(stage);
    }
    assignment.mutable_rendezvous()->set_scope(
        RendezvousScope(job.id(), attempt));
    assignment.mutable_rendezvous()->set_timeout_ms(rendezvous_timeout_ms);
    assignments.push_back(std::move(assignment));
  }
  return assignments;
}

}  // namespace glm
