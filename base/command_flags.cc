#include "base/command_flags.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace glm {

CommandFlags::CommandFlags(std::string usage) : usage_(std::move(usage)) {}

void CommandFlags::Add(const std::string& name, const std::string& help,
                       const std::string& default_value) {
  specs_[name] = Spec{help, default_value, false};
  order_.push_back(name);
}

void CommandFlags::AddBool(const std::string& name, const std::string& help) {
  specs_[name] = Spec{help, "", true};
  order_.push_back(name);
}

absl::Status CommandFlags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    std::string body;
    if (absl::StartsWith(arg, "--")) {
      body = arg.substr(2);
    } else if (arg.size() == 2 && arg[0] == '-') {
      body = arg.substr(1);
    } else {
      positional_.push_back(arg);
      continue;
    }
    std::string name = body;
    std::optional<std::string> value;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (it->second.is_bool) {
      values_[name] = value.value_or("true");
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    values_[name] = *value;
  }
  return absl::OkStatus();
}

std::string CommandFlags::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n");
  if (!order_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const std::string& name : order_) {
    const Spec& spec = specs_.at(name);
    std::string flag =
        name.size() == 1 ? absl::StrCat("-", name) : absl::StrCat("--", name);
    if (!spec.is_bool) absl::StrAppend(&flag, "=VALUE");
    absl::StrAppend(&out, "  ", flag, "\n      ", spec.help);
    if (!spec.default_value.empty()) {
      absl::StrAppend(&out, " (default ", spec.default_value, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

bool CommandFlags::Has(const std::string& name) const {
  if (values_.count(name)) return true;
  auto it = specs_.find(name);
  return it != specs_.end() && !it->second.default_value.empty();
}

std::string CommandFlags::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  auto it = specs_.find(name);
  return it == specs_.end() ? "" : it->second.default_value;
}

absl::Status CommandFlags::GetInt(const std::string& name, int64_t* out) const {
  if (!absl::SimpleAtoi(Get(name), out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an integer, got '", Get(name), "'"));
  }
  return absl::OkStatus();
}

absl::Status CommandFlags::GetInt(const std::string& name, int* out) const {
  if (!absl::SimpleAtoi(Get(name), out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an integer, got '", Get(name), "'"));
  }
  return absl::OkStatus();
}

absl::Status CommandFlags::GetDouble(const std::string& name,
                                     double* out) const {
  if (!absl::SimpleAtod(Get(name), out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be a number, got '", Get(name), "'"));
  }
  return absl::OkStatus();
}

bool CommandFlags::GetBool(const std::string& name) const {
  bool value = false;
  return absl::SimpleAtob(Get(name), &value) && value;
}

absl::Status CommandFlags::Require(const std::string& name) const {
  if (!Has(name))
    return absl::InvalidArgumentError(absl::StrCat("missing --", name));
  return absl::OkStatus();
}

}  // namespace glm
