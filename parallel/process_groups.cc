#include "parallel/process_groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace glm {
namespace {

// The coordinates two ranks must share to be in the same group of `kind`.
std::vector<int> Fixed(const RankCoordinates& c, GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return {};
    case GroupKind::kTp:
      return {c.cp, c.dp, c.pp};
    case GroupKind::kCp:
      return {c.tp, c.dp, c.pp};
    case GroupKind::kDp:
      return {c.tp, c.cp, c.pp};
    case GroupKind::kPp:
      return {c.tp, c.cp, c.dp};
    case GroupKind::kEp:
      return {c.etp, c.edp, c.pp};
    case GroupKind::kExpertDp:
      return {c.etp, c.ep, c.pp};
  }
  return {};
}

// `rank`'s index among `members`.
int IndexOf(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::find(members.begin(), members.end(), rank) -
                          members.begin());
}

// The factory that connects groups of `kind`.
const CollectivesFactory& FactoryOf(
    GroupKind kind, const CollectivesFactory& connect,
    const std::map<GroupKind, CollectivesFactory>& connect_kind) {
  const auto own = connect_kind.find(kind);
  return own != connect_kind.end() ? own->second : connect;
}

}  // namespace

const std::vector<GroupKind>& AllGroupKinds() {
  static const std::vector<GroupKind> kinds = {
      GroupKind::kWorld, GroupKind::kTp, GroupKind::kCp,      GroupKind::kDp,
      GroupKind::kPp,    GroupKind::kEp, GroupKind::kExpertDp};
  return kinds;
}

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return "world";
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kCp:
      return "cp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kExpertDp:
      return "edp";
  }
  return "?";
}

std::vector<int> GroupMembers(const RankGrid& grid, int rank, GroupKind kind) {
  const std::vector<int> mine = Fixed(grid.ranks.at(rank), kind);
  std::vector<int> members;
  for (const RankCoordinates& other : grid.ranks) {
    if (Fixed(other, kind) == mine) members.push_back(other.rank);
  }
  return members;
}

absl::StatusOr<ProcessGroups> ProcessGroups::Create(
    const RankGrid& grid, int rank, const CollectivesFactory& connect,
    const std::map<GroupKind, CollectivesFactory>& connect_kind) {
  if (rank < 0 || rank >= static_cast<int>(grid.ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the grid of ", grid.ranks.size()));
  }
  ProcessGroups groups;
  for (GroupKind kind : AllGroupKinds()) {
    const std::vector<int> members = GroupMembers(grid, rank, kind);
    const std::string key =
        absl::StrCat(GroupKindName(kind), "/", absl::StrJoin(members, "-"));
    absl::StatusOr<std::unique_ptr<Collectives>> group =
        FactoryOf(kind, connect, connect_kind)(
            key, IndexOf(members, rank), static_cast<int>(members.size()));
    if (!group.ok()) return group.status();
    groups.groups_[kind] = *std::move(group);
  }
  // The pipeline's edges last, by the pipeline group's factory.
  const std::vector<int> pipeline = GroupMembers(grid, rank, GroupKind::kPp);
  if (pipeline.size() > 1) {
    absl::StatusOr<std::unique_ptr<PipelineEdges>> edges =
        PipelineEdges::Connect(
            pipeline, IndexOf(pipeline, rank),
            FactoryOf(GroupKind::kPp, connect, connect_kind));
    if (!edges.ok()) return edges.status();
    groups.pipeline_edges_ = *std::move(edges);
  }
  return groups;
}

}  // namespace glm
