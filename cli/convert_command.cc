#include "cli/convert_command.h"

#include <iostream>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/command_flags.h"
#include "base/file_util.h"
#include "checkpoint/hf_convert.h"

namespace glm {
namespace {

// Parses `args`; on --help or bad usage writes what to say and returns the
// exit code to end with.
std::optional<int> ParseOrExit(CommandFlags& flags,
                               const std::vector<std::string>& args,
                               const std::vector<std::string>& required,
                               std::ostream& out, std::ostream& err,
                               const std::string& command) {
  absl::Status status = flags.Parse(args);
  if (flags.HelpRequested()) {
    out << flags.Help();
    return kExitOk;
  }
  for (const std::string& name : required) {
    if (status.ok()) status = flags.Require(name);
  }
  if (!status.ok()) {
    err << command << ": " << status.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  return std::nullopt;
}

int Report(const absl::StatusOr<VerifySummary>& summary,
           const std::string& command, const std::string& written,
           std::ostream& out, std::ostream& err) {
  if (!summary.ok()) {
    err << command << ": FAILED: " << summary.status().message() << "\n";
    return kExitFailure;
  }
  out << command << ": wrote " << written << "\nverified: " << summary->Text()
      << "\n";
  return kExitOk;
}

}  // namespace

int RunConvertImport(const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err) {
  CommandFlags flags(
      "glmctl convert import --hf=DIR --out=DIR [--tp=N --pp=N --ep=N "
      "--etp=N --layout=STR]");
  flags.Add("hf", "HF checkpoint folder (config.json and safetensors)");
  flags.Add("out", "native save directory; the checkpoint is iter_0000000");
  for (const char* name : {"tp", "pp", "ep", "etp"}) {
    flags.Add(name, absl::StrCat(name, " parallel size"), "1");
  }
  flags.Add("layout", "Megatron pipeline layout string (default: even split)");
  const std::string command = "glmctl convert import";
  if (std::optional<int> exit =
          ParseOrExit(flags, args, {"hf", "out"}, out, err, command)) {
    return *exit;
  }
  int tp = 1, pp = 1, ep = 1, etp = 1;
  absl::Status status = flags.GetInt("tp", &tp);
  if (status.ok()) status = flags.GetInt("pp", &pp);
  if (status.ok()) status = flags.GetInt("ep", &ep);
  if (status.ok()) status = flags.GetInt("etp", &etp);
  if (!status.ok()) {
    err << command << ": " << status.message() << "\n";
    return kExitUsage;
  }
  ImportOptions options;
  options.hf_dir = flags.Get("hf");
  options.out_dir = flags.Get("out");
  options.layout.set_tp(tp);
  options.layout.set_pp(pp);
  options.layout.set_ep(ep);
  options.layout.set_etp(etp);
  options.layout.set_cp(1);
  if (flags.Has("layout")) options.layout.set_layout(flags.Get("layout"));
  return Report(ImportHfCheckpoint(options), command,
                IterationDirectory(options.out_dir, 0), out, err);
}

int RunConvertExport(const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err) {
  CommandFlags flags(
      "glmctl convert export --checkpoint=DIR --out=DIR "
      "[--max-shard-bytes=N] [--config=FILE]");
  flags.Add("checkpoint",
            "native save directory (its latest checkpoint) or an iter_ "
            "directory");
  flags.Add("out", "HF folder to write");
  flags.Add("max-shard-bytes", "largest safetensors shard",
            absl::StrCat(kDefaultMaxShardBytes));
  flags.Add("config",
            "config.json for a checkpoint that keeps none (a trainer's)");
  const std::string command = "glmctl convert export";
  if (std::optional<int> exit =
          ParseOrExit(flags, args, {"checkpoint", "out"}, out, err, command)) {
    return *exit;
  }
  int64_t max_shard_bytes = 0;
  absl::Status status = flags.GetInt("max-shard-bytes", &max_shard_bytes);
  if (!status.ok() || max_shard_bytes <= 0) {
    err << command << ": --max-shard-bytes must be a positive integer\n";
    return kExitUsage;
  }
  ExportOptions options;
  options.checkpoint_dir = flags.Get("checkpoint");
  options.out_dir = flags.Get("out");
  options.max_shard_bytes = static_cast<uint64_t>(max_shard_bytes);
  if (flags.Has("config")) {
    absl::StatusOr<std::string> config = ReadFile(flags.Get("config"));
    if (!config.ok()) {
      err << command << ": " << config.status().message() << "\n";
      return kExitFailure;
    }
    options.hf_config_json = *config;
  }
  return Report(ExportHfCheckpoint(options), command, options.out_dir, out,
                err);
}

std::vector<Command> ConvertCommands() {
  return {
      {"convert import",
       "HF checkpoint -> native checkpoint (bitwise, verified)",
       [](const std::vector<std::string>& args) {
         return RunConvertImport(args, std::cout, std::cerr);
       }},
      {"convert export",
       "native checkpoint -> HF safetensors (bitwise, verified)",
       [](const std::vector<std::string>& args) {
         return RunConvertExport(args, std::cout, std::cerr);
       }},
  };
}

}  // namespace glm
