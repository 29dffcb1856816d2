// glmctl convert import / export: bit-exact conversion between Hugging Face
// checkpoints and native sharded checkpoints, each ending with a bitwise
// verification of what it wrote.
#ifndef GLM_CLI_CONVERT_COMMAND_H_
#define GLM_CLI_CONVERT_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace glm {

std::vector<Command> ConvertCommands();

// The commands' bodies, writing to `out` and `err`; each returns kExitOk,
// kExitFailure (conversion or verification failed) or kExitUsage.
int RunConvertImport(const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err);
int RunConvertExport(const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err);

}  // namespace glm

#endif  // GLM_CLI_CONVERT_COMMAND_H_
