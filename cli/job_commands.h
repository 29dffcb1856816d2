// glmctl's job commands, talking to a glm-coordinator's JobService: submit,
// list, get, watch, cancel, checkpoints. Every one takes --coordinator (env
// GLM_COORDINATOR, default localhost:7070), --token-file (env GLM_TOKEN_FILE),
// --tls-ca and
// --output=table|json. A gRPC error prints its code and message and exits 1.
#ifndef GLM_CLI_JOB_COMMANDS_H_
#define GLM_CLI_JOB_COMMANDS_H_

#include <vector>

#include "cli/command.h"

namespace glm {

std::vector<Command> JobCommands();

}  // namespace glm

#endif  // GLM_CLI_JOB_COMMANDS_H_
