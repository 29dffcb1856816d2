#include "training/log_line.h"

#include "absl/strings/str_format.h"

namespace glm {

std::string FormatLogLine(const v1::StepMetrics& m, int64_t global_batch_size) {
  return absl::StrFormat(
      " iteration %8d/%8d | consumed samples: %12d | elapsed time per "
      "iteration "
      "(ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.3f | tokens/s per "
      "device: %.1f | learning rate: %E | global batch size: %5d | lm loss: %E "
      "| mtp_1 loss: %E | indexer loss: %E | grad norm: %.3f | number of "
      "skipped iterations: %3d | number of nan iterations: %3d | peak memory "
      "(MiB): %.0f |",
      m.iteration(), m.train_iters(), m.consumed_samples(), m.step_time_ms(),
      m.tflops_per_device(), m.tokens_per_sec_per_device(), m.learning_rate(),
      global_batch_size, m.lm_loss(), m.mtp_loss(), m.indexer_loss(),
      m.grad_norm(), m.skipped_iterations(), m.nan_iterations(),
      m.peak_memory_bytes() / (1024.0 * 1024.0));
}

}  // namespace glm
