// Flags of one glmctl subcommand. absl::flags has one global flag namespace and
// no subcommands; glmctl needs each subcommand to accept only its own flags,
// print its own
// --help, and exit 2 on bad usage, so each subcommand declares its flags here.
#ifndef GLM_BASE_COMMAND_FLAGS_H_
#define GLM_BASE_COMMAND_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace glm {

class CommandFlags {
 public:
  // `usage` is the first line of --help, e.g. "glmctl layout check [flags]".
  explicit CommandFlags(std::string usage);

  // Declares a flag. `default_value` empty means the flag has no default.
  void Add(const std::string& name, const std::string& help,
           const std::string& default_value = "");
  // Declares a flag that takes no value (--name sets it, --name=false clears
  // it).
  void AddBool(const std::string& name, const std::string& help);

  // Parses args (after the subcommand words). Accepts --name=value, --name
  // value and -f value for single-letter aliases declared as names of length 1.
  // Unknown flags and missing values are InvalidArgument. Positional arguments
  // are kept in order.
  absl::Status Parse(const std::vector<std::string>& args);

  bool HelpRequested() const { return help_; }
  std::string Help() const;

  bool Has(const std::string& name) const;
  std::string Get(const std::string& name) const;
  // Integer flag; InvalidArgument naming the flag when it is not an integer.
  absl::Status GetInt(const std::string& name, int64_t* out) const;
  absl::Status GetInt(const std::string& name, int* out) const;
  absl::Status GetDouble(const std::string& name, double* out) const;
  bool GetBool(const std::string& name) const;
  // InvalidArgument "missing --name" unless the flag was given or has a
  // default.
  absl::Status Require(const std::string& name) const;

  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Spec {
    std::string help;
    std::string default_value;
    bool is_bool = false;
  };
  std::string usage_;
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

}  // namespace glm

#endif  // GLM_BASE_COMMAND_FLAGS_H_
