// A rank's process groups for a training job: connecting the groups of the
// rank grid through the coordinator's rendezvous, and the ranks' agreement to
// stop together.
#ifndef GLM_WORKER_JOB_GROUPS_H_
#define GLM_WORKER_JOB_GROUPS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "parallel/process_groups.h"
#include "parallel/rank_grid.h"
#include "proto/job_spec.pb.h"
#include "proto/worker_service.pb.h"
#include "worker/rendezvous_store.h"

namespace glm {

// Connects every group of the assignment's rank, bootstrapped through
// `rendezvous` (not owned) and bounded by the assignment's rendezvous
// timeout; a collective waits up to the spec's
// parallel.collective_timeout_seconds (0: 300 s). Groups run over Gloo/TCP,
// peers dialing this rank at `host` (the worker's advertised address);
// on `device` "cuda:N" in a CUDA build every group but the world runs over
// NCCL instead where its members each have a GPU of their own. A peer that
// never arrives is an error naming this rank and the group.
absl::StatusOr<ProcessGroups> ConnectJobGroups(const v1::Assignment& assignment,
                                               const RankGrid& grid,
                                               RendezvousStore* rendezvous,
                                               const std::string& host,
                                               const std::string& device);

// True on every rank when any rank was asked to stop (`world` null: one
// rank), so that all stop after the same iteration.
absl::StatusOr<bool> AnyRankStops(bool stop, Collectives* world);

}  // namespace glm

#endif  // GLM_WORKER_JOB_GROUPS_H_
