// A glmctl subcommand: its words ("layout check"), a one-line summary, and the
// function that runs it with the remaining arguments and returns the process
// exit code.
#ifndef GLM_CLI_COMMAND_H_
#define GLM_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

namespace glm {

struct Command {
  std::string words;
  std::string summary;
  std::function<int(const std::vector<std::string>& args)> run;
};

}  // namespace glm

#endif  // GLM_CLI_COMMAND_H_
