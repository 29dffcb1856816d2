// A rank's process groups, Megatron's: tensor, context, data and pipeline
// parallel groups of the dense grid, expert and expert-data parallel groups of
// the expert grid, and the whole world. A group holds the ranks whose other
// coordinates (in the same grid) equal this rank's, ordered by global rank.
#ifndef GLM_PARALLEL_PROCESS_GROUPS_H_
#define GLM_PARALLEL_PROCESS_GROUPS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "parallel/pipeline_edges.h"
#include "parallel/rank_grid.h"

namespace glm {

enum class GroupKind { kWorld, kTp, kCp, kDp, kPp, kEp, kExpertDp };

// Every kind, in the order groups are connected.
const std::vector<GroupKind>& AllGroupKinds();
const char* GroupKindName(GroupKind kind);

// The global ranks of `rank`'s group of `kind`, in group-rank order.
std::vector<int> GroupMembers(const RankGrid& grid, int rank, GroupKind kind);

class ProcessGroups {
 public:
  // Connects every group of `rank`, kinds in AllGroupKinds() order (all ranks
  // follow it, so no two groups wait on each other): the kinds in
  // `connect_kind` by their factory, the others by `connect`; then, where
  // pp > 1, the pipeline's edges (parallel/pipeline_edges.h) by the pipeline
  // group's factory.
  static absl::StatusOr<ProcessGroups> Create(
      const RankGrid& grid, int rank, const CollectivesFactory& connect,
      const std::map<GroupKind, CollectivesFactory>& connect_kind = {});

  Collectives& group(GroupKind kind) { return *groups_.at(kind); }
  // Null where pp is 1.
  PipelineEdges* pipeline_edges() { return pipeline_edges_.get(); }

 private:
  std::map<GroupKind, std::unique_ptr<Collectives>> groups_;
  std::unique_ptr<PipelineEdges> pipeline_edges_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_PROCESS_GROUPS_H_
