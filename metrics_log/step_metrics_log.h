// A training job's per-step metrics on disk, beside its checkpoints: a
// TensorBoard event file and a JSON-lines file (one object per step) in one
// folder. Every numeric field of glm.v1.StepMetrics is written under its
// proto field name; the per-layer expert load imbalance becomes
// expert_load_imbalance/layer_<i> scalars and one JSON array.
#ifndef GLM_METRICS_LOG_STEP_METRICS_LOG_H_
#define GLM_METRICS_LOG_STEP_METRICS_LOG_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "metrics_log/event_file_writer.h"
#include "proto/metrics.pb.h"

namespace glm {

// The folder a job with checkpoints under `save_dir` logs its steps in.
std::string StepMetricsDir(const std::string& save_dir);

class StepMetricsLog {
 public:
  // Opens a new event file and appends to `dir`/steps.jsonl (a restarted job
  // keeps its earlier lines; TensorBoard merges the event files by step).
  static absl::StatusOr<std::unique_ptr<StepMetricsLog>> Open(
      const std::string& dir);
  ~StepMetricsLog();

  StepMetricsLog(const StepMetricsLog&) = delete;
  StepMetricsLog& operator=(const StepMetricsLog&) = delete;

  absl::Status Write(const v1::StepMetrics& metrics);

 private:
  StepMetricsLog(std::unique_ptr<EventFileWriter> events, std::string path,
                 FILE* lines);

  std::unique_ptr<EventFileWriter> events_;
  std::string lines_path_;
  FILE* lines_;
};

}  // namespace glm

#endif  // GLM_METRICS_LOG_STEP_METRICS_LOG_H_
