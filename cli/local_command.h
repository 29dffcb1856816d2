// `glmctl local`: runs a job on a one-machine cluster - an embedded coordinator
// and N CPU workers - and follows it to the end. Without --job it pretrains
// glm5.2-tiny on the shipped corpus (examples/pretrain.json).
#ifndef GLM_CLI_LOCAL_COMMAND_H_
#define GLM_CLI_LOCAL_COMMAND_H_

#include <vector>

#include "cli/command.h"

namespace glm {

std::vector<Command> LocalCommands();

}  // namespace glm

#endif  // GLM_CLI_LOCAL_COMMAND_H_
