// Bit-exact conversion between Hugging Face checkpoints (config.json plus
// safetensors, sharded or not) and native checkpoints.
//
// Import writes <out>/iter_0000000 sharded as the parallel layout says, every
// tensor in its own dtype with its bytes copied verbatim, config.json kept
// byte for byte and the expert form (per expert or fused) recorded. Export
// writes model-0000i-of-0000n.safetensors shards of at most a given size,
// model.safetensors.index.json and the kept config.json, with the names and
// expert form the import saw. Both stream from memory-mapped files tensor by
// tensor (only a tensor split over ranks is assembled in memory) and end by
// re-reading what they wrote and comparing it with the source bitwise.
#ifndef GLM_CHECKPOINT_HF_CONVERT_H_
#define GLM_CHECKPOINT_HF_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "proto/checkpoint.pb.h"

namespace glm {

// The outcome of a bitwise comparison.
struct VerifySummary {
  int64_t tensors = 0;
  int64_t elements = 0;
  // "N tensors, M elements bitwise equal".
  std::string Text() const;
};

// Compares the model tensors of `checkpoint` (optimizer state, named
// "<state>/<param>", is left out) with `hf`: the same names, dtypes, shapes
// and bytes. The error names every missing or unexpected key (up to a few)
// and the first tensor that differs.
absl::StatusOr<VerifySummary> CompareWithHf(const NativeCheckpoint& checkpoint,
                                            const SafetensorsFolder& hf);

struct ImportOptions {
  std::string hf_dir;
  std::string out_dir;  // the native save directory
  v1::ParallelLayout layout;
};

// Imports, then verifies the written checkpoint against the HF folder.
// Unexpected or missing keys and wrong shapes are errors before anything is
// written.
absl::StatusOr<VerifySummary> ImportHfCheckpoint(const ImportOptions& options);

inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

struct ExportOptions {
  // A native save directory (its latest checkpoint) or an iteration
  // directory.
  std::string checkpoint_dir;
  std::string out_dir;
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  // config.json bytes for a checkpoint that keeps none (a trainer's); a
  // checkpoint's own config.json wins when both exist.
  std::string hf_config_json;
};

// Exports the model tensors, then verifies the written folder against the
// checkpoint.
absl::StatusOr<VerifySummary> ExportHfCheckpoint(const ExportOptions& options);

}  // namespace glm

#endif  // GLM_CHECKPOINT_HF_CONVERT_H_
