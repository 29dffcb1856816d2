// The bounds every field of a job spec keeps before any rule of what a job
// may be looks at it: sizes of strings and lists, the characters of names and
// paths, numbers that are finite and within ranges whose products fit in 64
// bits. A spec within them costs the coordinator little memory and time to
// check, store and list, and prints safely on a terminal.
#ifndef GLM_JOBSPEC_SPEC_BOUNDS_H_
#define GLM_JOBSPEC_SPEC_BOUNDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"

namespace glm {

// A spec is a few kilobytes; an inline HF config.json (at most 1 MiB) is most
// of what may make it larger.
inline constexpr int64_t kMaxJobSpecBytes = int64_t{2} << 20;
inline constexpr int kMaxJobNameBytes = 128;
inline constexpr int kMaxPathBytes = 4096;
inline constexpr int kMaxDataSources = 1024;
inline constexpr int kMaxLoraTargets = 64;
inline constexpr int kMaxWorldSize = 1 << 20;
// Also bounds vpp and the stage layer counts: no model has more layers.
inline constexpr int kMaxLayersPerSpec = 1 << 10;
inline constexpr int64_t kMaxIterations = int64_t{1} << 31;
inline constexpr int64_t kMaxGlobalBatchSize = int64_t{1} << 24;
// The most positions a model config may have; a job's own model bounds
// seq_length further.
inline constexpr int64_t kMaxSequenceLength = int64_t{1} << 24;
inline constexpr int kMaxRestarts = 1000;
inline constexpr int kMaxLoraRank = 1 << 16;

// OK, or INVALID_ARGUMENT starting with the field path ("name: ...",
// "training.lr: ...") that quotes a bounded part of the offending value.
absl::Status CheckSpecBounds(const v1::JobSpec& spec);

// Job names: letters, digits, '.', '_' and '-', at most kMaxJobNameBytes;
// empty is allowed (the job id names the job).
absl::Status CheckJobName(const std::string& name);

}  // namespace glm

#endif  // GLM_JOBSPEC_SPEC_BOUNDS_H_
