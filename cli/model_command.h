// glmctl model ...: inspect a model configuration.
#ifndef GLM_CLI_MODEL_COMMAND_H_
#define GLM_CLI_MODEL_COMMAND_H_

#include <string>
#include <vector>

#include "cli/command.h"
#include "model/config.h"

namespace glm {

std::vector<Command> ModelCommands();

// What `glmctl model info` prints: parameter counts and each layer's kind.
std::string ModelInfoText(const ModelConfig& config);

}  // namespace glm

#endif  // GLM_CLI_MODEL_COMMAND_H_
