// glmctl's flags may come before the command words as well as after them
// ("glmctl --coordinator=A --token-file=T submit -f J"), as operators of other
// cluster tools expect. The flags a job command shares (--coordinator,
// --token-file, --tls-ca, --output) take their value from the next argument
// when written without '='; any other leading flag must be --name=value or a
// flag without a value.
#ifndef GLM_CLI_GLOBAL_FLAGS_H_
#define GLM_CLI_GLOBAL_FLAGS_H_

#include <string>
#include <vector>

namespace glm {

// `args` with its leading flags (and their values) moved after the first
// argument that is not a flag, the command's first word, and the words that
// follow it up to the next flag. `args` without leading flags, or with
// nothing but flags, comes back unchanged.
std::vector<std::string> MoveLeadingFlagsAfterCommand(
    const std::vector<std::string>& args);

}  // namespace glm

#endif  // GLM_CLI_GLOBAL_FLAGS_H_
