// glmctl plan: predicts the memory and step time of a GLM-5.x job on a
// cluster and recommends how to split it (planner/; docs/planner.md has the
// model's terms and their sources).
#ifndef GLM_CLI_PLAN_COMMAND_H_
#define GLM_CLI_PLAN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/command.h"

namespace glm {

std::vector<Command> PlanCommands();

// What `glmctl plan ARGS` prints; InvalidArgument naming the flag at fault.
absl::StatusOr<std::string> PlanText(const std::vector<std::string>& args);

}  // namespace glm

#endif  // GLM_CLI_PLAN_COMMAND_H_
