// What `glmctl plan` prints: one split explained term by term, or a
// search's best splits with their memory and time broken down.
#ifndef GLM_CLI_PLAN_REPORT_H_
#define GLM_CLI_PLAN_REPORT_H_

#include <string>

#include "planner/evaluation.h"
#include "planner/hardware.h"
#include "planner/search.h"

namespace glm {

// The job and cluster a plan is for, in a few lines.
std::string PlanHeader(const PlanJob& job, int world,
                       const ClusterSpec& cluster);

// Every pp rank's memory by term, the busiest rank's activations of one
// micro batch by term, and the step time by term.
std::string ExplainText(const Evaluation& evaluation,
                        const ClusterSpec& cluster);

// The best splits, fastest first, with peak memory and step time by term.
std::string SearchText(const SearchResult& result, const ClusterSpec& cluster);

}  // namespace glm

#endif  // GLM_CLI_PLAN_REPORT_H_
