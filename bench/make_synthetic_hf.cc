// Writes a synthetic HF checkpoint of a preset model (random bytes, real names
// and shapes) for the conversion benchmark.
//
//   make_synthetic_hf --preset=glm5.2-mini --out=DIR [--dtype=bf16|f32]
//       [--form=per_expert|fused] [--max-shard-bytes=N]
#include <iostream>

#include "base/command_flags.h"
#include "base/file_util.h"
#include "checkpoint/synthetic_hf.h"
#include "model/config.h"

namespace glm {
namespace {

int Main(int argc, char** argv) {
  CommandFlags flags(
      "make_synthetic_hf --preset=NAME --out=DIR [--dtype=bf16|f32] "
      "[--form=per_expert|fused] [--max-shard-bytes=N]");
  flags.Add("preset", "model preset", "glm5.2-mini");
  flags.Add("out", "folder to write");
  flags.Add("dtype", "bf16 or f32", "bf16");
  flags.Add("form", "per_expert or fused", "per_expert");
  flags.Add("max-shard-bytes", "largest shard", "2000000000");
  absl::Status status =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (status.ok()) status = flags.Require("out");
  int64_t max_shard_bytes = 0;
  if (status.ok()) status = flags.GetInt("max-shard-bytes", &max_shard_bytes);
  if (flags.HelpRequested() || !status.ok()) {
    std::cerr << status.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  absl::StatusOr<ModelConfig> config = PresetConfig(flags.Get("preset"));
  absl::StatusOr<ExpertForm> form = ExpertFormFromName(flags.Get("form"));
  if (!config.ok() || !form.ok()) {
    std::cerr << (config.ok() ? form.status() : config.status()).message()
              << "\n";
    return kExitUsage;
  }
  SyntheticHfOptions options;
  options.form = *form;
  options.dtype = flags.Get("dtype") == "f32" ? DType::kF32 : DType::kBF16;
  config->torch_dtype = options.dtype == DType::kF32 ? "float32" : "bfloat16";
  options.max_shard_bytes = static_cast<uint64_t>(max_shard_bytes);
  status = MakeDirectories(flags.Get("out"));
  if (status.ok()) {
    status = WriteSyntheticHfCheckpoint(flags.Get("out"), *config, options);
  }
  if (!status.ok()) {
    std::cerr << status.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
