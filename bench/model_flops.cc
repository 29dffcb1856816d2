// Training FLOPs per token of a preset at a sequence length, by the same count
// the trainer reports (training/flops.h), for benchmarks that time other
// implementations:  model_flops PRESET|CONFIG.json SEQ_LENGTH
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/config.h"
#include "training/flops.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: model_flops PRESET|CONFIG.json SEQ_LENGTH\n");
    return 2;
  }
  const std::string model = argv[1];
  absl::StatusOr<glm::ModelConfig> config =
      model.size() > 5 && model.substr(model.size() - 5) == ".json"
          ? glm::ReadHfConfigFile(model)
          : glm::PresetConfig(model);
  const long long seq = std::atoll(argv[2]);
  if (!config.ok() || seq <= 0) {
    std::fprintf(stderr, "unknown preset, bad config or bad sequence length\n");
    return 2;
  }
  // One sequence, per token: 3 x 2 x forward MACs / seq.
  std::printf("%.6e\n", glm::TrainingFlops(*config, seq, 1) / seq);
  return 0;
}
