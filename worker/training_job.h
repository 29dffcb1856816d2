// Runs one rank's part of a training job from its assignment: builds the model,
// the data and the trainer, steps to the end, and reports through the hooks.
#ifndef GLM_WORKER_TRAINING_JOB_H_
#define GLM_WORKER_TRAINING_JOB_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config.h"
#include "proto/checkpoint.pb.h"
#include "proto/job_spec.pb.h"
#include "proto/metrics.pb.h"
#include "proto/worker_service.pb.h"
#include "training/trainer.h"
#include "worker/rendezvous_store.h"

namespace glm {

struct TrainingJobHooks {
  // After every iteration; returning true stops the job (CANCELLED).
  std::function<bool(const v1::StepMetrics&)> on_step;
  std::function<void(const v1::CheckpointManifest&)> on_checkpoint;
  // Human-readable progress (the Megatron log line, where outputs went).
  std::function<void(const std::string&)> log;
};

// The trainer's options as the spec's training section gives them, with
// Megatron's defaults for fields left at zero.
TrainerOptions TrainerOptionsFromSpec(const ModelConfig& model,
                                      const v1::TrainingSpec& training);

// Megatron's --data-path string ("W1 PREFIX1 W2 PREFIX2 ...") of the spec.
absl::StatusOr<std::string> DataPathFromSpec(const v1::DataSpec& data);

// Ranks of a job with world_size > 1 connect their process groups through
// `rendezvous` (not owned; may be null for one rank) within the assignment's
// rendezvous timeout; a peer that does not arrive is an error naming the
// group, not a hang. Every rank calls hooks.on_step; all stop after the same
// iteration when any is asked to. Rank 0 writes the checkpoints.
// `device` is the worker's: "cpu" or "cuda:N"; `host` the address its peers
// dial for the job's process groups.
absl::Status RunTrainingJob(const v1::Assignment& assignment,
                            const TrainingJobHooks& hooks,
                            RendezvousStore* rendezvous = nullptr,
                            const std::string& device = "cpu",
                            const std::string& host = "127.0.0.1");

}  // namespace glm

#endif  // GLM_WORKER_TRAINING_JOB_H_
