// Synthetic HF checkpoints for tests and benchmarks: a config.json and every
// tensor of a model (names and shapes from HfNameMap) filled with random
// bytes, written shard by shard so memory stays at one shard however large
// the model.
#ifndef GLM_CHECKPOINT_SYNTHETIC_HF_H_
#define GLM_CHECKPOINT_SYNTHETIC_HF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/safetensors.h"
#include "model/config.h"

namespace glm {

struct SyntheticHfOptions {
  ExpertForm form = ExpertForm::kPerExpert;
  // Every tensor's dtype, except e_score_correction_bias (always F32).
  DType dtype = DType::kBF16;
  // Also write the MTP layer's own embed_tokens and shared_head.head.
  bool mtp_extras = false;
  uint64_t max_shard_bytes = 200'000;
  uint32_t seed = 42;
  // For tests of bad input: keys added (F32 [4]) and required keys left out.
  std::vector<std::string> extra_keys;
  std::vector<std::string> dropped_keys;
};

// Writes config.json (pretty-printed with an extra field, so a byte-for-byte
// copy is distinguishable from a rewrite) and
// model-0000i-of-0000n.safetensors shards with model.safetensors.index.json
// into `dir`, which must exist.
absl::Status WriteSyntheticHfCheckpoint(const std::string& dir,
                                        const ModelConfig& config,
                                        const SyntheticHfOptions& options);

}  // namespace glm

#endif  // GLM_CHECKPOINT_SYNTHETIC_HF_H_
