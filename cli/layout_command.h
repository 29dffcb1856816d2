// glmctl layout check, layout plan and grid: pipeline layouts under Megatron's
// rules plus GLM-5.2 index sharing, and the rank grid.
#ifndef GLM_CLI_LAYOUT_COMMAND_H_
#define GLM_CLI_LAYOUT_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace glm {

std::vector<Command> LayoutCommands();

// The commands' bodies, writing to `out` and `err`; each returns the exit code
// (kExitOk, kExitFailure when the layout or grid is invalid, kExitUsage on bad
// flags).
int RunLayoutCheck(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err);
int RunLayoutPlan(const std::vector<std::string>& args, std::ostream& out,
                  std::ostream& err);
int RunGrid(const std::vector<std::string>& args, std::ostream& out,
            std::ostream& err);

}  // namespace glm

#endif  // GLM_CLI_LAYOUT_COMMAND_H_
