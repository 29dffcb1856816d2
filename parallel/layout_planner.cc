#include "parallel/layout_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "parallel/layout_parser.h"

namespace glm {
namespace {

constexpr double kInfeasible = std::numeric_limits<double>::infinity();
// Costs are sums of the constants above; this absorbs floating-point rounding
// when comparing a stage against the optimal bottleneck.
constexpr double kCostTolerance = 1e-9;

struct PlanShape {
  int layers = 0;
  int mtp = 0;
  int pp = 1;
  int chunks = 1;
  IndexSharing sharing;
  int stages() const { return pp * chunks; }
};

double PlannedStageCost(const PlanShape& shape, int stage, int layers,
                        bool mtp_here) {
  double cost = layers * kDecoderLayerCost;
  if (stage == 0) cost += kEmbeddingCost;
  if (stage == shape.stages() - 1) cost += kLossCost;
  if (mtp_here) cost += shape.mtp * kMtpLayerCost;
  return cost;
}

// What stage s holds: decoder layers up to `next_position` (layers placed so
// far) and whether the MTP layers go here.
struct StageChoice {
  int next_position = 0;
  bool mtp_here = false;
};

// Exact search over stage boundaries. best[s][p][m] is the best objective of
// stages s.. given p decoder layers placed before stage s and m = MTP layers
// already placed; `fold(stage_cost, rest)` combines one stage with the stages
// after it (kInfeasible rejects). A stage that receives layers must start on a
// computing layer; the MTP layers go after the last decoder layer, in a
// last-chunk stage.
template <typename Fold>
std::vector<std::string> SearchStages(const PlanShape& shape, Fold fold,
                                      double* objective) {
  const int num_stages = shape.stages();
  const int n = shape.layers;
  auto index = [n](int s, int p, bool m) { return (s * (n + 1) + p) * 2 + m; };
  std::vector<double> best((num_stages + 1) * (n + 1) * 2, kInfeasible);
  std::vector<StageChoice> choice(best.size());
  best[index(num_stages, n, true)] = 0;
  for (int s = num_stages - 1; s >= 0; --s) {
    const bool last_chunk = s / shape.pp == shape.chunks - 1;
    for (int p = 0; p <= n; ++p) {
      const bool may_hold_layers =
          p < n && shape.sharing.IsComputingLayer(p + 1);
      for (bool m : {false, true}) {
        for (int q = p; q <= (may_hold_layers ? n : p); ++q) {
          for (bool mtp_here : {false, true}) {
            if (mtp_here && (m || q != n || !last_chunk)) continue;
            const double rest = best[index(s + 1, q, m || mtp_here)];
            if (rest == kInfeasible) continue;
            const double value =
                fold(PlannedStageCost(shape, s, q - p, mtp_here), rest);
            if (value < best[index(s, p, m)]) {
              best[index(s, p, m)] = value;
              choice[index(s, p, m)] = {q, mtp_here};
            }
          }
        }
      }
    }
  }
  const bool mtp_placed = shape.mtp == 0;
  *objective = best[index(0, 0, mtp_placed)];
  std::vector<std::string> stages;
  if (*objective == kInfeasible) return stages;
  int p = 0;
  bool m = mtp_placed;
  for (int s = 0; s < num_stages; ++s) {
    const StageChoice& c = choice[index(s, p, m)];
    std::string symbols = s == 0 ? "E" : "";
    symbols += std::string(c.next_position - p, 't');
    if (c.mtp_here) symbols += std::string(shape.mtp, 'm');
    if (s == num_stages - 1) symbols += "L";
    stages.push_back(std::move(symbols));
    p = c.next_position;
    m = m || c.mtp_here;
  }
  return stages;
}

absl::StatusOr<std::vector<std::string>> PlanStagesFor(const PlanShape& shape) {
  const int64_t steps =
      int64_t{shape.stages()} * (shape.layers + 1) * (shape.layers + 1);
  if (steps > kMaxPlannerSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("planning ", shape.layers, " layers over ", shape.stages(),
                     " stages takes ", steps, " search steps, more than ",
                     kMaxPlannerSteps, "; give a layout to check instead"));
  }
  double bottleneck = 0;
  SearchStages(
      shape, [](double cost, double rest) { return std::max(cost, rest); },
      &bottleneck);
  double spread = 0;
  std::vector<std::string> stages = SearchStages(
      shape,
      [bottleneck](double cost, double rest) {
        return cost > bottleneck + kCostTolerance ? kInfeasible
                                                  : cost * cost + rest;
      },
      &spread);
  if (stages.empty()) {
    // Unreachable for a valid request: all layers in stage 0 always qualifies.
    return absl::InternalError("layout planner found no layout");
  }
  return stages;
}

// Moves `position` (decoder layers before a stage) to the nearest position
// where the stage would start on a computing layer or hold no layers; ties go
// down.
int NearestBoundary(int position, int layers, const IndexSharing& sharing) {
  auto valid = [&](int p) {
    return p >= 0 && p <= layers &&
           (p == layers || sharing.IsComputingLayer(p + 1));
  };
  for (int distance = 0;; ++distance) {
    if (valid(position - distance)) return position - distance;
    if (valid(position + distance)) return position + distance;
  }
}

// `stages` with each boundary moved by NearestBoundary; E, m and L stay put.
std::vector<std::string> RoundBoundaries(const std::vector<std::string>& stages,
                                         int layers,
                                         const IndexSharing& sharing) {
  std::vector<int>
      positions;  // decoder layers before each stage, then the total
  int before = 0;
  for (const std::string& stage : stages) {
    positions.push_back(NearestBoundary(before, layers, sharing));
    before += std::count(stage.begin(), stage.end(), 't');
  }
  positions.push_back(layers);
  std::vector<std::string> rounded;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string& stage = stages[i];
    std::string symbols = stage.find('E') != std::string::npos ? "E" : "";
    symbols += std::string(positions[i + 1] - positions[i], 't');
    symbols += std::string(std::count(stage.begin(), stage.end(), 'm'), 'm');
    if (stage.find('L') != std::string::npos) symbols += "L";
    rounded.push_back(std::move(symbols));
  }
  return rounded;
}

PlanShape ShapeOf(const LayoutRequest& request, int chunks) {
  return {request.num_layers, request.mtp_layers, request.pp, chunks,
          request.sharing};
}

}  // namespace

std::string CostModelDescription() {
  return absl::StrFormat(
      "cost model (units of one decoder layer): decoder layer t = %g, "
      "embedding "
      "E = %g, loss L = %g, MTP layer m = %g (a decoder layer plus its own "
      "loss).\n"
      "The plan minimises the largest stage cost, then the sum of squared "
      "stage "
      "costs, with every stage that holds decoder layers starting on a "
      "computing "
      "layer.\n",
      kDecoderLayerCost, kEmbeddingCost, kLossCost, kMtpLayerCost);
}

double StageCost(const StageSlice& slice) {
  return slice.num_layers() * kDecoderLayerCost +
         (slice.has_embedding ? kEmbeddingCost : 0) +
         (slice.has_loss ? kLossCost : 0) + slice.mtp_layers * kMtpLayerCost;
}

double LargestStageCost(const std::vector<StageSlice>& slices) {
  double largest = 0;
  for (const StageSlice& slice : slices) {
    largest = std::max(largest, StageCost(slice));
  }
  return largest;
}

absl::StatusOr<std::string> PlanLayout(const LayoutRequest& request) {
  if (!request.layout.empty() || request.num_layers_in_first_stage > 0 ||
      request.num_layers_in_last_stage > 0) {
    return absl::InvalidArgumentError(
        "the planner chooses the split itself: give no layout and no "
        "num_layers_in_first/last_stage");
  }
  if (absl::Status valid = ValidateRequest(request); !valid.ok()) return valid;
  absl::StatusOr<std::vector<std::string>> stages =
      PlanStagesFor(ShapeOf(request, std::max(request.vpp, 1)));
  if (!stages.ok()) return stages.status();
  return FormatLayout(*stages);
}

absl::StatusOr<LayoutSuggestion> SuggestLayout(const LayoutRequest& request) {
  if (absl::Status valid = ValidateRequest(request); !valid.ok()) return valid;
  absl::StatusOr<std::vector<std::string>> stages = RequestedStages(request);
  if (stages.ok() && ValidateStageRules(*stages, request).ok()) {
    LayoutRequest rounded = request;
    rounded.layout = FormatLayout(
        RoundBoundaries(*stages, request.num_layers, request.sharing));
    rounded.num_layers_in_first_stage = rounded.num_layers_in_last_stage = 0;
    if (PlanStages(rounded).ok()) {
      return LayoutSuggestion{rounded.layout,
                              "each stage boundary moved to the nearest "
                              "computing layer"};
    }
  }
  int chunks = std::max(request.vpp, 1);
  if (request.vpp <= 1 && stages.ok() && stages->size() % request.pp == 0) {
    chunks = stages->size() / request.pp;
  }
  absl::StatusOr<std::vector<std::string>> planned =
      PlanStagesFor(ShapeOf(request, chunks));
  if (!planned.ok()) return planned.status();
  return LayoutSuggestion{FormatLayout(*planned),
                          "balanced plan for the same sizes (layout plan)"};
}

}  // namespace glm
