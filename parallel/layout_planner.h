// Chooses pipeline layouts: a balanced one from scratch (PlanLayout) and the
// valid one nearest to a rejected request (SuggestLayout).
//
// Cost model, in units of one decoder layer's forward+backward time:
//   decoder layer 't'  kDecoderLayerCost = 1
//   embedding 'E'      kEmbeddingCost    = 1  little compute, but a vocab-sized
//                                             table and its optimizer state
//   loss 'L'           kLossCost         = 2  output projection over the
//                                             vocabulary and cross-entropy:
//                                             about two GLM-5 layers
//   MTP layer 'm'      kMtpLayerCost     = 3  a decoder layer plus its own
//                                             output projection and loss
// A stage costs the sum over its symbols. The planner minimises the largest
// stage cost (the pipeline's bottleneck) and, among layouts with that
// bottleneck, the sum of squared stage costs (spreading the slack), subject to
// every Megatron rule and every non-empty stage starting on a computing layer.
// Stages may be empty, as in Megatron, so a layout exists whenever the request
// itself is valid, even with more stages than computing layers.
#ifndef GLM_PARALLEL_LAYOUT_PLANNER_H_
#define GLM_PARALLEL_LAYOUT_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline_layout.h"

namespace glm {

inline constexpr double kDecoderLayerCost = 1.0;
inline constexpr double kEmbeddingCost = 1.0;
inline constexpr double kLossCost = 2.0;
inline constexpr double kMtpLayerCost = kDecoderLayerCost + kLossCost;

// The cost model above in a few lines, for --help and `layout plan` output.
std::string CostModelDescription();

double StageCost(const StageSlice& slice);
// The pipeline's bottleneck: the largest StageCost.
double LargestStageCost(const std::vector<StageSlice>& slices);

// The exact search takes stages * (layers + 1)^2 steps; more is refused.
inline constexpr int64_t kMaxPlannerSteps = int64_t{1} << 28;

// A balanced valid layout for request.num_layers, mtp_layers, pp, vpp (0 or 1 =
// one stage per pp rank) and sharing. InvalidArgument when the request gives a
// layout or an uneven split (the planner chooses the split), is itself invalid
// or needs more than kMaxPlannerSteps, saying why.
absl::StatusOr<std::string> PlanLayout(const LayoutRequest& request);

struct LayoutSuggestion {
  std::string layout;
  std::string method;  // how it was found, for people
};

// The valid layout nearest to a request PlanStages rejects. When only the
// index-sharing rule fails, "nearest" keeps every stage's E, m and L and moves
// each stage boundary the fewest layers needed to land on a computing layer (or
// on the end of the decoder layers), ties toward the earlier layer; otherwise
// it is PlanLayout's layout for the same sizes. InvalidArgument when the
// request's numbers themselves are invalid.
absl::StatusOr<LayoutSuggestion> SuggestLayout(const LayoutRequest& request);

}  // namespace glm

#endif  // GLM_PARALLEL_LAYOUT_PLANNER_H_
