#include "checkpoint/synthetic_hf.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "base/atomic_file.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

struct PlannedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes;
};

std::vector<PlannedTensor> PlanTensors(const HfNameMap& map,
                                       const SyntheticHfOptions& options) {
  std::vector<PlannedTensor> tensors;
  auto add = [&](const std::string& name, DType dtype,
                 const std::vector<int64_t>& shape) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    tensors.push_back(
        {name, dtype, shape, static_cast<uint64_t>(count * DTypeSize(dtype))});
  };
  for (const HfTensor& tensor : map.tensors()) {
    if (!tensor.required && !options.mtp_extras) continue;
    if (std::count(options.dropped_keys.begin(), options.dropped_keys.end(),
                   tensor.name)) {
      continue;
    }
    const bool fp32 = absl::EndsWith(tensor.name, "e_score_correction_bias");
    add(tensor.name, fp32 ? DType::kF32 : options.dtype, tensor.shape);
  }
  for (const std::string& name : options.extra_keys) {
    add(name, DType::kF32, {4});
  }
  return tensors;
}

// Consecutive groups of at most `max_bytes` (a larger tensor alone).
std::vector<std::vector<PlannedTensor>> GroupIntoShards(
    const std::vector<PlannedTensor>& tensors, uint64_t max_bytes) {
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t shard_bytes = 0;
  for (const PlannedTensor& tensor : tensors) {
    if (!shards.back().empty() && shard_bytes + tensor.bytes > max_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(tensor);
    shard_bytes += tensor.bytes;
  }
  return shards;
}

}  // namespace

absl::Status WriteSyntheticHfCheckpoint(const std::string& dir,
                                        const ModelConfig& config,
                                        const SyntheticHfOptions& options) {
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(config, options.form, v1::ParallelLayout());
  if (!map.ok()) return map.status();
  nlohmann::json json = nlohmann::json::parse(ToHfConfigJson(config));
  json["transformers_version"] = "5.17.0";
  absl::Status status =
      WriteFileAtomically(JoinPath(dir, "config.json"), json.dump(3) + "\n\n");
  if (!status.ok()) return status;

  std::mt19937_64 random(options.seed);
  const std::vector<std::vector<PlannedTensor>> shards =
      GroupIntoShards(PlanTensors(*map, options), options.max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  uint64_t total_size = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    std::vector<std::string> storage;
    storage.reserve(shards[i].size());
    std::vector<TensorBytes> tensors;
    for (const PlannedTensor& tensor : shards[i]) {
      std::string bytes(tensor.bytes, '\0');
      for (size_t at = 0; at + 8 <= bytes.size(); at += 8) {
        const uint64_t word = random();
        std::copy_n(reinterpret_cast<const char*>(&word), 8, &bytes[at]);
      }
      storage.push_back(std::move(bytes));
      tensors.push_back(
          {tensor.name, tensor.dtype, tensor.shape, storage.back()});
      weight_map[tensor.name] = file;
      total_size += tensor.bytes;
    }
    status = WriteSafetensors(JoinPath(dir, file), tensors, {{"format", "pt"}});
    if (!status.ok()) return status;
  }
  return WriteSafetensorsIndex(dir, weight_map, total_size);
}

}  // namespace glm
