// For tests: a worker's options for the long-context bench's job
// (bench/gpu_long_context_bench.sh), whose peaks the GPU runs measured.
#ifndef GLM_PLANNER_LONG_CONTEXT_OPTIONS_H_
#define GLM_PLANNER_LONG_CONTEXT_OPTIONS_H_

#include <cstdint>

#include "training/trainer.h"

namespace glm {

// glm5.2-mini without its MTP layer, one sequence of `seq` tokens a step,
// every layer recomputed.
TrainerOptions LongContextOptions(int64_t seq);

}  // namespace glm

#endif  // GLM_PLANNER_LONG_CONTEXT_OPTIONS_H_
