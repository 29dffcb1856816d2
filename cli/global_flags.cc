#include "cli/global_flags.h"

#include <set>

namespace glm {
namespace {

bool IsFlag(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

// The shared job-command flags that take a value, so that "--coordinator A"
// before the command keeps A with its flag.
bool TakesSeparateValue(const std::string& flag) {
  static const std::set<std::string> kValued = {"--coordinator", "--token-file",
                                                "--tls-ca", "--output"};
  return kValued.count(flag) > 0;
}

}  // namespace

std::vector<std::string> MoveLeadingFlagsAfterCommand(
    const std::vector<std::string>& args) {
  std::vector<std::string> leading;
  size_t at = 0;
  while (at < args.size() && IsFlag(args[at])) {
    leading.push_back(args[at]);
    if (TakesSeparateValue(args[at]) && at + 1 < args.size()) {
      leading.push_back(args[++at]);
    }
    ++at;
  }
  if (leading.empty() || at == args.size()) return args;
  std::vector<std::string> moved;
  while (at < args.size() && !IsFlag(args[at])) moved.push_back(args[at++]);
  moved.insert(moved.end(), leading.begin(), leading.end());
  moved.insert(moved.end(), args.begin() + at, args.end());
  return moved;
}

}  // namespace glm
