#include "parallel/layer_split.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// Decoder layers held by each pp rank (rank order).
absl::StatusOr<std::vector<int>> LayersPerRank(const LayoutRequest& request) {
  const int pp = request.pp;
  const int first = request.num_layers_in_first_stage;
  const int last = request.num_layers_in_last_stage;
  if (first == 0 && last == 0) {
    if (request.num_layers % pp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("even split: num_layers ", request.num_layers,
                       " is not divisible by pp ", pp,
                       "; give a layout or --num-layers-in-first/last-stage"));
    }
    return std::vector<int>(pp, request.num_layers / pp);
  }
  if (pp < 2) {
    return absl::InvalidArgumentError(
        "uneven split: --num-layers-in-first/last-stage need pp >= 2");
  }
  std::vector<int> per_rank(pp, 0);
  const int middle_ranks = pp - (first > 0) - (last > 0);
  const int middle_layers = request.num_layers - first - last;
  if (middle_layers < 0 || (middle_ranks == 0 && middle_layers != 0) ||
      (middle_ranks > 0 && middle_layers % middle_ranks != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "uneven split: the ", std::max(middle_layers, 0),
        " layers left after first stage ", first, " and last stage ", last,
        " (of ", request.num_layers, ") do not divide evenly over the ",
        middle_ranks, " middle pp ranks"));
  }
  for (int rank = 0; rank < pp; ++rank) {
    per_rank[rank] = middle_ranks > 0 ? middle_layers / middle_ranks : 0;
  }
  if (first > 0) per_rank.front() = first;
  if (last > 0) per_rank.back() = last;
  return per_rank;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitLayers(
    const LayoutRequest& request) {
  absl::StatusOr<std::vector<int>> per_rank = LayersPerRank(request);
  if (!per_rank.ok()) return per_rank.status();
  const int pp = request.pp;
  const int vpp = std::max(request.vpp, 1);
  std::vector<std::string> stages(pp * vpp);
  for (int rank = 0; rank < pp; ++rank) {
    if ((*per_rank)[rank] % vpp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("split: pp rank ", rank, " holds ", (*per_rank)[rank],
                       " layers, not divisible by vpp ", vpp));
    }
    for (int chunk = 0; chunk < vpp; ++chunk) {
      stages[chunk * pp + rank] = std::string((*per_rank)[rank] / vpp, 't');
    }
  }
  stages.front().insert(0, "E");
  stages.back() += std::string(request.mtp_layers, 'm') + "L";
  return stages;
}

}  // namespace glm
