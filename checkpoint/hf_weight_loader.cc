#include "checkpoint/hf_weight_loader.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace glm {
namespace {

constexpr char kFusedGateUp[] = "mlp.experts.gate_up_proj";
constexpr char kFusedDown[] = "mlp.experts.down_proj";
constexpr size_t kNamesListed = 5;

// "a, b, c and 7 more".
std::string ListNames(const std::vector<std::string>& names) {
  std::vector<std::string> shown(
      names.begin(), names.begin() + std::min(names.size(), kNamesListed));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kNamesListed) {
    absl::StrAppend(&text, " and ", names.size() - kNamesListed, " more");
  }
  return text;
}

class Loader {
 public:
  Loader(const SafetensorsFolder& folder, const ModelConfig& config)
      : folder_(folder),
        mtp_prefix_(
            absl::StrCat("model.layers.", config.num_hidden_layers, ".")),
        has_mtp_(config.num_mtp_layers > 0) {}

  absl::StatusOr<WeightLoadSummary> Run(
      const std::vector<WeightTarget>& targets) {
    for (const WeightTarget& target : targets) {
      if (absl::StartsWith(target.name, mtp_prefix_ + "self_attn.indexer.")) {
        mtp_has_indexer_ = true;
      }
    }
    for (const WeightTarget& target : targets) {
      absl::Status status = Load(target);
      if (!status.ok()) return status;
    }
    if (!missing_.empty()) {
      return absl::NotFoundError(absl::StrCat(
          missing_.size(),
          " weight(s) missing from the checkpoint: ", ListNames(missing_)));
    }
    std::vector<std::string> unexpected;
    for (const std::string& name : folder_.TensorNames()) {
      if (used_.count(name)) continue;
      (Ignorable(name) ? summary_.ignored : unexpected).push_back(name);
    }
    if (!unexpected.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          unexpected.size(), " unexpected key(s) in the checkpoint (",
          folder_.FileOf(unexpected[0])->path(), "): ", ListNames(unexpected)));
    }
    return summary_;
  }

 private:
  absl::Status Load(const WeightTarget& target) {
    if (folder_.Find(target.name) != nullptr) {
      return Read(target.name, target.shape, target.part, target.data);
    }
    const bool gate_up = absl::EndsWith(target.name, kFusedGateUp);
    if (!gate_up && !absl::EndsWith(target.name, kFusedDown)) {
      missing_.push_back(target.name);
      return absl::OkStatus();
    }
    return LoadPerExpert(target, gate_up);
  }

  // A fused expert target from per-expert keys: expert e's gate [I, H] and up
  // [I, H] are rows [0, I) and [I, 2I) of gate_up slab e; its down [H, I] is
  // down slab e. A part of the target is a range of experts.
  absl::Status LoadPerExpert(const WeightTarget& target, bool gate_up) {
    const std::string prefix = target.name.substr(
        0, target.name.size() -
               std::string(gate_up ? "gate_up_proj" : "down_proj").size());
    if (target.shape.size() != 3 || (target.part && target.part->dim != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target ", target.name,
                       " is not [experts, rows, cols] or a range of experts"));
    }
    const int64_t experts = target.shape[0];
    const int64_t rows = target.shape[1];
    const int64_t cols = target.shape[2];
    const TensorPart held = target.part.value_or(TensorPart{0, 0, experts});
    if (gate_up) ++summary_.per_expert_layers;
    for (int64_t e = 0; e < experts; ++e) {
      const bool read = target.data != nullptr && e >= held.first &&
                        e < held.first + held.count;
      float* slab =
          read ? target.data + (e - held.first) * rows * cols : nullptr;
      const std::string expert = absl::StrCat(prefix, e, ".");
      absl::Status status = gate_up ? Read(expert + "gate_proj.weight",
                                           {rows / 2, cols}, std::nullopt, slab)
                                    : Read(expert + "down_proj.weight",
                                           {rows, cols}, std::nullopt, slab);
      if (status.ok() && gate_up) {
        status = Read(expert + "up_proj.weight", {rows / 2, cols}, std::nullopt,
                      read ? slab + rows / 2 * cols : nullptr);
      }
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

  // Reads `part` of `key` (all of it when absent) into `dest`; null `dest`:
  // checks the key only.
  absl::Status Read(const std::string& key, const std::vector<int64_t>& shape,
                    const std::optional<TensorPart>& part, float* dest) {
    const TensorInfo* info = folder_.Find(key);
    if (info == nullptr) {
      missing_.push_back(key);
      return absl::OkStatus();
    }
    const SafetensorsFile& file = *folder_.FileOf(key);
    if (info->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor '", key, "' has shape ",
          ShapeString(info->shape), ", the model needs ", ShapeString(shape)));
    }
    absl::StatusOr<std::string_view> bytes = file.Bytes(key);
    if (!bytes.ok()) return bytes.status();
    // Converting no values checks the dtype of a key that is not read.
    float unused;
    absl::Status status =
        ConvertToFloat32(info->dtype, bytes->data(), 0, &unused);
    const PartRuns runs =
        dest == nullptr
            ? PartRuns()
            : RunsOf(part.value_or(TensorPart{0, 0, shape[0]}), shape);
    const int64_t size = DTypeSize(info->dtype);
    for (int64_t r = 0; status.ok() && r < runs.count; ++r) {
      status = ConvertToFloat32(
          info->dtype, bytes->data() + (runs.first + r * runs.stride) * size,
          runs.length, dest + r * runs.length);
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor '", key, "': ", status.message()));
    }
    used_.insert(key);
    if (dest == nullptr) return absl::OkStatus();
    ++summary_.tensors_read;
    summary_.elements += runs.count * runs.length;
    return absl::OkStatus();
  }

  // Checkpoint keys the model does not run (see the header comment).
  bool Ignorable(const std::string& key) const {
    if (!absl::StartsWith(key, mtp_prefix_)) return false;
    if (!has_mtp_) return true;
    const std::string rest = key.substr(mtp_prefix_.size());
    return rest == "embed_tokens.weight" || rest == "shared_head.head.weight" ||
           (!mtp_has_indexer_ && absl::StartsWith(rest, "self_attn.indexer."));
  }

  const SafetensorsFolder& folder_;
  const std::string mtp_prefix_;
  const bool has_mtp_;
  bool mtp_has_indexer_ = false;
  std::set<std::string> used_;
  std::vector<std::string> missing_;
  WeightLoadSummary summary_;
};

}  // namespace

absl::StatusOr<WeightLoadSummary> LoadHfWeights(
    const SafetensorsFolder& folder, const ModelConfig& config,
    const std::vector<WeightTarget>& targets) {
  return Loader(folder, config).Run(targets);
}

absl::StatusOr<WeightLoadSummary> LoadHfWeights(const SafetensorsFolder& folder,
                                                ModelParameters* params) {
  const HeldTensors& held = params->held();
  std::vector<WeightTarget> targets;
  for (const NamedTensor& named : params->Named()) {
    WeightTarget& target = targets.emplace_back();
    target.name = named.name;
    target.shape = params->WholeShape(named.name);
    if (!held.Holds(named.name)) continue;
    target.data = named.value->data();
    const auto part = held.parts.find(named.name);
    if (part != held.parts.end()) target.part = part->second;
  }
  return LoadHfWeights(folder, params->config(), targets);
}

absl::StatusOr<std::unique_ptr<ModelParameters>> LoadHfModel(
    const std::string& dir, const HeldTensors& held) {
  absl::StatusOr<ModelConfig> config = ReadHfConfigFile(dir + "/config.json");
  if (!config.ok()) return config.status();
  absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir);
  if (!folder.ok()) return folder.status();
  auto params = std::make_unique<ModelParameters>(*config, held);
  absl::StatusOr<WeightLoadSummary> loaded =
      LoadHfWeights(*folder, params.get());
  if (!loaded.ok()) return loaded.status();
  return params;
}

}  // namespace glm
