#include "parallel/pipeline_edges.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// One directed edge as every rank names it: hidden states (0) or gradients
// (1), from one global rank to another.
struct EdgeKey {
  int direction;
  int from, to;

  bool operator<(const EdgeKey& other) const {
    return std::tie(direction, from, to) <
           std::tie(other.direction, other.from, other.to);
  }
  std::string Name() const {
    return absl::StrCat(direction == 0 ? "pp-hidden/" : "pp-gradient/", from,
                        "-", to);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineEdges>> PipelineEdges::Connect(
    const std::vector<int>& members, int rank,
    const CollectivesFactory& connect) {
  const int size = static_cast<int>(members.size());
  if (size < 2 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline edges: rank ", rank, " of ", size,
                     " members (needs two or more)"));
  }
  const int me = members[rank], next = members[(rank + 1) % size],
            previous = members[(rank + size - 1) % size];
  // This rank's edges in the order every rank connects them.
  std::vector<std::pair<EdgeKey, Edge>> edges = {
      {{0, me, next}, kToNext},
      {{0, previous, me}, kFromPrevious},
      {{1, me, previous}, kToPrevious},
      {{1, next, me}, kFromNext}};
  std::sort(edges.begin(), edges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::unique_ptr<PipelineEdges> connected(new PipelineEdges(size, rank));
  for (const auto& [key, edge] : edges) {
    const int member = key.from == me ? 0 : 1;
    absl::StatusOr<std::unique_ptr<Collectives>> group =
        connect(key.Name(), member, 2);
    if (!group.ok()) return group.status();
    connected->groups_[edge] = *std::move(group);
  }
  return connected;
}

PipelineLinks PipelineEdges::Links() const {
  PipelineLinks links;
  links.size = size_;
  links.rank = rank_;
  // The sender is member 0 of each edge's group.
  links.to_next = {groups_[kToNext].get(), 1};
  links.from_previous = {groups_[kFromPrevious].get(), 0};
  links.to_previous = {groups_[kToPrevious].get(), 1};
  links.from_next = {groups_[kFromNext].get(), 0};
  return links;
}

PipelineLinkViews::PipelineLinkViews(const PipelineLinks& links,
                                     Allocator* device)
    : links_(links) {
  for (const PipelineLink* link : {&links.to_next, &links.from_previous,
                                   &links.to_previous, &links.from_next}) {
    std::unique_ptr<GroupViews>& views = views_[link->group];
    if (views == nullptr) {
      views = std::make_unique<GroupViews>(link->group, device);
    }
  }
}

PipelineLinks PipelineLinkViews::For(bool on_device) const {
  PipelineLinks viewed = links_;
  for (PipelineLink* link : {&viewed.to_next, &viewed.from_previous,
                             &viewed.to_previous, &viewed.from_next}) {
    link->group = views_.at(link->group)->For(on_device);
  }
  return viewed;
}

}  // namespace glm
