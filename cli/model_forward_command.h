// `glmctl model forward`: runs an HF checkpoint on token ids and writes the
// logits.
#ifndef GLM_CLI_MODEL_FORWARD_COMMAND_H_
#define GLM_CLI_MODEL_FORWARD_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/command.h"

namespace glm {

std::vector<Command> ModelForwardCommands();

// One sequence per non-empty line, ids separated by spaces; every sequence the
// same length. Errors name the file and line.
absl::StatusOr<std::vector<std::vector<int32_t>>> ParseTokenLines(
    const std::string& text, const std::string& file_name);

}  // namespace glm

#endif  // GLM_CLI_MODEL_FORWARD_COMMAND_H_
