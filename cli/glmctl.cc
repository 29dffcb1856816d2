// glmctl: the command-line client. Each subcommand lives in its own file under
// cli/ and is listed in Commands() below.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/command_flags.h"
#include "cli/command.h"
#include "cli/convert_command.h"
#include "cli/data_command.h"
#include "cli/global_flags.h"
#include "cli/job_commands.h"
#include "cli/layout_command.h"
#include "cli/local_command.h"
#include "cli/model_command.h"
#include "cli/model_forward_command.h"
#include "cli/plan_command.h"
#include "version/version.h"

namespace glm {
namespace {

// Each group of subcommands adds one line here.
std::vector<Command> Commands() {
  std::vector<Command> commands;
  for (const std::vector<Command>& group : {
           ModelCommands(),
           ModelForwardCommands(),
           ConvertCommands(),
           LayoutCommands(),
           JobCommands(),
           DataCommands(),
           LocalCommands(),
           PlanCommands(),
       }) {
    commands.insert(commands.end(), group.begin(), group.end());
  }
  return commands;
}

void PrintUsage(const std::vector<Command>& commands) {
  std::cout << "glmctl: train GLM-5.x models on a glm-coordinator cluster\n\n"
               "usage: glmctl [flags] COMMAND [flags]   (glmctl COMMAND --help "
               "for its flags;\n       glmctl --version)\n\n"
               "commands:\n";
  for (const Command& command : commands) {
    std::cout << "  " << command.words;
    for (size_t i = command.words.size(); i < 22; ++i) std::cout << ' ';
    std::cout << command.summary << "\n";
  }
}

// The longest command whose words prefix the arguments.
const Command* Match(const std::vector<Command>& commands,
                     const std::vector<std::string>& args, size_t* used) {
  const Command* best = nullptr;
  for (const Command& command : commands) {
    std::vector<std::string> words = absl::StrSplit(command.words, ' ');
    if (words.size() > args.size()) continue;
    bool match = true;
    for (size_t i = 0; i < words.size(); ++i) match &= words[i] == args[i];
    if (match && (!best || words.size() > *used)) {
      best = &command;
      *used = words.size();
    }
  }
  return best;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<Command> commands = Commands();
  if (!args.empty() && args[0] == "--version") {
    std::cout << "glmctl " << kGlmVersion << "\n";
    return kExitOk;
  }
  // "glmctl --coordinator=A submit -f J" is "glmctl submit -f J
  // --coordinator=A": the command parses the flags as its own.
  args = MoveLeadingFlagsAfterCommand(args);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" ||
      args[0] == "help") {
    PrintUsage(commands);
    return args.empty() ? kExitUsage : kExitOk;
  }
  size_t used = 0;
  const Command* command = Match(commands, args, &used);
  if (!command) {
    std::cerr << "glmctl: unknown command '" << args[0] << "'\n";
    PrintUsage(commands);
    return kExitUsage;
  }
  return command->run(
      std::vector<std::string>(args.begin() + used, args.end()));
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
