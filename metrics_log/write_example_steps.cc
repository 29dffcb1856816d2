// Writes three known steps with StepMetricsLog into the folder named by its
// argument, for tensorboard_read_test.sh to read back with TensorBoard.
#include <iostream>
#include <memory>

#include "metrics_log/step_metrics_log.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_example_steps DIR\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<glm::StepMetricsLog>> log =
      glm::StepMetricsLog::Open(argv[1]);
  if (!log.ok()) {
    std::cerr << log.status() << "\n";
    return 1;
  }
  for (int iteration = 1; iteration <= 3; ++iteration) {
    glm::v1::StepMetrics metrics;
    metrics.set_iteration(iteration);
    metrics.set_train_iters(3);
    metrics.set_consumed_samples(8 * iteration);
    metrics.set_lm_loss(6.0 - 0.5 * iteration);
    metrics.set_grad_norm(0.25 * iteration);
    metrics.set_learning_rate(3e-4);
    metrics.add_expert_load_imbalance(1.0 + 0.125 * iteration);
    if (absl::Status written = (*log)->Write(metrics); !written.ok()) {
      std::cerr << written << "\n";
      return 1;
    }
  }
  return 0;
}
