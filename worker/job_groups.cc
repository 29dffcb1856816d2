#include "worker/job_groups.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/gloo_collectives.h"
#include "parallel/gloo_store.h"

namespace glm {

absl::StatusOr<ProcessGroups> ConnectJobGroups(const v1::Assignment& assignment,
                                               const RankGrid& grid,
                                               RendezvousStore* rendezvous,
                                               const std::string& host) {
  if (rendezvous == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", assignment.rank(), " of ",
                     assignment.world_size(), ": no rendezvous store"));
  }
  GlooOptions options;
  if (assignment.rendezvous().timeout_ms() > 0) {
    options.connect_timeout =
        absl::Milliseconds(assignment.rendezvous().timeout_ms());
  }
  // A peer that hangs without closing its connections fails the job after
  // this rather than after Gloo's 30 minutes (0 in the spec: 300 s).
  const int collective_timeout_seconds =
      assignment.spec().parallel().collective_timeout_seconds();
  options.timeout = absl::Seconds(
      collective_timeout_seconds > 0 ? collective_timeout_seconds : 300);
  options.hostname = host;
  auto store = std::make_shared<GlooStore>(rendezvous, options.connect_timeout);
  absl::StatusOr<ProcessGroups> groups = ProcessGroups::Create(
      grid, assignment.rank(), GlooFactory(std::move(store), options));
  if (!groups.ok()) {
    return absl::Status(
        groups.status().code(),
        absl::StrCat("rank ", assignment.rank(), " could not reach its peers: ",
                     groups.status().message()));
  }
  return groups;
}

absl::StatusOr<bool> AnyRankStops(bool stop, Collectives* world) {
  if (world == nullptr) return stop;
  int64_t stops = stop ? 1 : 0;
  if (absl::Status status = world->AllReduceSum(&stops, 1); !status.ok()) {
    return status;
  }
  return stops > 0;
}

}  // namespace glm
