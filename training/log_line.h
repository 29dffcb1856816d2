// The per-iteration log line, laid out as Megatron prints it so that existing
// log scrapers keep working, with our extra fields (tokens/s, indexer loss,
// peak memory).
#ifndef GLM_TRAINING_LOG_LINE_H_
#define GLM_TRAINING_LOG_LINE_H_

#include <string>

#include "proto/metrics.pb.h"

namespace glm {

std::string FormatLogLine(const v1::StepMetrics& metrics,
                          int64_t global_batch_size);

}  // namespace glm

#endif  // GLM_TRAINING_LOG_LINE_H_
