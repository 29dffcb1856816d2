// Everything a training run needs to continue exactly where it stopped: weights
// and buffers, optimizer moments, scheduler position, data order and random
// streams. The trainer fills one of these (pointing at its own tensors) to
// save, and hands one with the same names and shapes to load into.
#ifndef GLM_CHECKPOINT_TRAINING_STATE_H_
#define GLM_CHECKPOINT_TRAINING_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace glm {

// A tensor owned by the trainer, under its checkpoint name.
struct StateTensor {
  std::string name;
  Tensor* tensor = nullptr;
};

struct TrainingState {
  // Model parameters and buffers (e.g. the router's e_score_correction_bias),
  // by HF name, as this rank holds them.
  std::vector<StateTensor> model;
  // Optimizer moments: "exp_avg/<param>", "exp_avg_sq/<param>".
  std::vector<StateTensor> optimizer;
  int64_t optimizer_steps = 0;

  // Scheduler and progress: the last completed iteration.
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;

  // Data order and random streams.
  uint64_t data_seed = 0;
  uint64_t rng_seed = 0;
  // std::mt19937_64 serialized with operator<< (its full state, portable text).
  std::string rng_state;
};

}  // namespace glm

#endif  // GLM_CHECKPOINT_TRAINING_STATE_H_
