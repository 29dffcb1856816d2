#include "worker/job_groups.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend_factory.h"
#include "parallel/distinct_device_groups.h"
#include "parallel/gloo_collectives.h"
#include "parallel/gloo_store.h"
#ifdef GLM_WITH_CUDA
#include "parallel/nccl_collectives.h"
#endif

namespace glm {
namespace {

// The groups not over Gloo: on a GPU (a CUDA build), the data-parallel,
// expert, tensor-, context- and pipeline-parallel groups (and the pipeline's
// edges) over NCCL where their members each have a GPU of their own (one
// worker per GPU), over Gloo where two share one; none on the CPU. (The
// trainer reaches them from the host through staged views; the gradients,
// ZeRO-1's shards, the routed rows, the token-parallel gathers and
// reductions and the stages' hidden states go to them where they lie.)
absl::StatusOr<std::map<GroupKind, CollectivesFactory>> DeviceGroups(
    const std::string& device, RendezvousStore* rendezvous,
    const GlooOptions& options, const CollectivesFactory& gloo) {
  std::map<GroupKind, CollectivesFactory> groups;
#ifdef GLM_WITH_CUDA
  if (device == "cpu") return groups;
  absl::StatusOr<int> gpu = CudaOrdinal(device);
  if (!gpu.ok()) return gpu.status();
  absl::StatusOr<std::string> uuid = GpuUuid(*gpu);
  if (!uuid.ok()) return uuid.status();
  for (GroupKind kind : {GroupKind::kDp, GroupKind::kEp, GroupKind::kExpertDp,
                         GroupKind::kTp, GroupKind::kCp, GroupKind::kPp}) {
    groups[kind] =
        OnDistinctDevices(rendezvous, *uuid, options.connect_timeout,
                          NcclFactory(rendezvous, options.timeout, *gpu), gloo);
  }
#endif
  return groups;
}

}  // namespace

absl::StatusOr<ProcessGroups> ConnectJobGroups(const v1::Assignment& assignment,
                                               const RankGrid& grid,
                                               RendezvousStore* rendezvous,
                                               const std::string& host,
                                               const std::string& device) {
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
  const CollectivesFactory gloo = GlooFactory(std::move(store), options);
  absl::StatusOr<std::map<GroupKind, CollectivesFactory>> device_groups =
      DeviceGroups(device, rendezvous, options, gloo);
  if (!device_groups.ok()) return device_groups.status();
  absl::StatusOr<ProcessGroups> groups =
      ProcessGroups::Create(grid, assignment.rank(), gloo, *device_groups);
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
