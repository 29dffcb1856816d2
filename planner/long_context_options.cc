#include "planner/long_context_options.h"

#include <cassert>

#include "model/config.h"

namespace glm {

TrainerOptions LongContextOptions(int64_t seq) {
  absl::StatusOr<ModelConfig> mini = PresetConfig("glm5.2-mini");
  assert(mini.ok());
  TrainerOptions options;
  options.model = *mini;
  options.model.num_mtp_layers = 0;
  options.seq_length = seq;
  options.global_batch_size = 1;
  options.micro_batch_size = 1;
  options.loss.recompute_layers = true;
  return options;
}

}  // namespace glm
