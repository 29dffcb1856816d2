#include "cli/model_command.h"

#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/command_flags.h"

namespace glm {
namespace {

std::string Billions(int64_t count) {
  return absl::StrFormat("%d (%.3gB)", count, count / 1e9);
}

std::string AttentionKind(const ModelConfig& config, int layer) {
  const int source = config.index_sharing.SourceLayer(layer);
  if (source == layer) return "computing";
  return absl::StrCat("skip (top-k of layer ", source, ")");
}

// The config named by --config=FILE or --preset=NAME; prints usage errors
// itself and sets *exit_code when it returns nullopt.
std::optional<ModelConfig> ConfigFromFlags(const std::string& usage,
                                           const std::vector<std::string>& args,
                                           int* exit_code) {
  CommandFlags flags(usage);
  flags.Add("config", "an HF config.json");
  flags.Add("preset",
            "a built-in model: glm5.2-tiny, glm5-tiny, glm5.2-mini, "
            "glm5.2");
  absl::Status parsed = flags.Parse(args);
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (!parsed.ok() || flags.Has("config") == flags.Has("preset")) {
    std::cerr << "glmctl: "
              << (parsed.ok() ? "give exactly one of --config and --preset"
                              : std::string(parsed.message()))
              << "\n"
              << flags.Help();
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  absl::StatusOr<ModelConfig> config =
      flags.Has("config") ? ReadHfConfigFile(flags.Get("config"))
                          : PresetConfig(flags.Get("preset"));
  if (!config.ok()) {
    std::cerr << "glmctl: " << config.status().message() << "\n";
    *exit_code = kExitFailure;
    return std::nullopt;
  }
  return *config;
}

int RunModelInfo(const std::vector<std::string>& args) {
  int exit_code = kExitOk;
  std::optional<ModelConfig> config = ConfigFromFlags(
      "glmctl model info (--config=FILE | --preset=NAME)", args, &exit_code);
  if (config) std::cout << ModelInfoText(*config);
  return exit_code;
}

int RunModelConfig(const std::vector<std::string>& args) {
  int exit_code = kExitOk;
  std::optional<ModelConfig> config = ConfigFromFlags(
      "glmctl model config (--config=FILE | --preset=NAME)", args, &exit_code);
  if (config) std::cout << ToHfConfigJson(*config);
  return exit_code;
}

}  // namespace

std::string ModelInfoText(const ModelConfig& config) {
  const ParameterCount count = CountParameters(config);
  std::string out = absl::StrCat(
      "parameters (without MTP): ", Billions(count.total), "\n",
      "active per token:         ", Billions(count.active), "\n",
      "MTP parameters:           ", Billions(count.mtp), " in ",
      config.num_mtp_layers, " layer(s)\n", "index sharing: freq ",
      config.index_sharing.topk_freq, ", offset ",
      config.index_sharing.skip_topk_offset, "\n\nlayer  mlp    attention\n");
  for (int layer = 1; layer <= config.num_hidden_layers; ++layer) {
    absl::StrAppend(&out,
                    absl::StrFormat("%-6d %-6s %s\n", layer,
                                    config.IsMoeLayer(layer) ? "moe" : "dense",
                                    AttentionKind(config, layer)));
  }
  for (int i = 0; i < config.num_mtp_layers; ++i) {
    const std::string attention =
        config.index_sharing.topk_freq == 1
            ? std::string("computing")
            : absl::StrCat(
                  "skip (top-k of layer ",
                  config.index_sharing.SourceLayer(config.num_hidden_layers),
                  ")");
    absl::StrAppend(&out,
                    absl::StrFormat("%-6s %-6s %s\n", "mtp", "moe", attention));
  }
  return out;
}

std::vector<Command> ModelCommands() {
  return {
      {"model info", "parameter counts and layer kinds of a model config",
       RunModelInfo},
      {"model config", "a model config as HF config.json (e.g. of a preset)",
       RunModelConfig}};
}

}  // namespace glm
