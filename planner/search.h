// The search for a split: every tensor, pipeline (with virtual stages),
// context, expert and expert-tensor parallel size that divides the world and
// that the model and batch allow (planner/split.h's rules), each pipeline
// with the layout planner's balanced layout (index sharing kept inside
// stages), each recomputation choice the store allows; what does not fit
// the device is dropped, the rest ranked by predicted step time.
#ifndef GLM_PLANNER_SEARCH_H_
#define GLM_PLANNER_SEARCH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "planner/evaluation.h"

namespace glm {

struct SearchOptions {
  // Bounds of the space; tensor-parallel ranks beyond the fast domain are
  // not tried (their all-gathers in every layer would cross the network).
  int max_vpp = 4;
  int max_etp = 8;
  // Recomputation choices tried (this trainer's stores: none, and full
  // where a rank runs one model without expert parallelism).
  std::vector<Recompute> recompute = {Recompute::kNone, Recompute::kSelective,
                                      Recompute::kFull};
  int keep = 5;  // the best this many are returned
};

struct SearchResult {
  std::vector<Evaluation> best;  // fastest first
  int candidates = 0;            // valid splits tried
  // Step seconds of every fitting split, fastest first.
  std::vector<double> fitting_seconds;
};

absl::StatusOr<SearchResult> SearchSplits(const PlanJob& job, int world,
                                          const ClusterSpec& cluster,
                                          const KernelRates& rates,
                                          const SearchOptions& options);

// Where a split taking `seconds` a step would rank among a search's fitting
// splits (1: none is faster).
int RankAmong(const SearchResult& result, double seconds);

}  // namespace glm

#endif  // GLM_PLANNER_SEARCH_H_
