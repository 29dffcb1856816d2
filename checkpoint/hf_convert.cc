#include "checkpoint/hf_convert.h"

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"
#include "base/file_util.h"
#include "checkpoint/safetensors_stream.h"
#include "model/config.h"

namespace glm {
namespace {

constexpr char kHfConfigName[] = "config.json";
constexpr size_t kNamesInErrors = 8;

// "'a', 'b', ... and 3 more".
std::string NameList(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (size_t i = 0; i < names.size() && i < kNamesInErrors; ++i) {
    quoted.push_back(absl::StrCat("'", names[i], "'"));
  }
  std::string text = absl::StrJoin(quoted, ", ");
  if (names.size() > kNamesInErrors) {
    absl::StrAppend(&text, " and ", names.size() - kNamesInErrors, " more");
  }
  return text;
}

// Missing and unexpected keys as one error, or OK when there are none.
absl::Status KeyError(const std::string& where,
                      const std::vector<std::string>& missing,
                      const std::vector<std::string>& unexpected) {
  if (missing.empty() && unexpected.empty()) return absl::OkStatus();
  std::string text = where + ":";
  if (!missing.empty()) {
    absl::StrAppend(&text, " ", missing.size(),
                    " missing key(s): ", NameList(missing), ";");
  }
  if (!unexpected.empty()) {
    absl::StrAppend(&text, " ", unexpected.size(),
                    " unexpected key(s): ", NameList(unexpected), ";");
  }
  text.pop_back();
  return absl::InvalidArgumentError(text);
}

bool IsModelTensor(const std::string& name) {
  return name.find('/') == std::string::npos;
}

std::vector<int64_t> ShapeOf(
    const google::protobuf::RepeatedField<int64_t>& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

// Compares two views into mapped files block by block, releasing each block's
// pages once compared, so a large tensor is never resident twice.
bool SameBytes(std::string_view a, std::string_view b) {
  constexpr size_t kBlock = size_t{64} << 20;
  if (a.size() != b.size()) return false;
  for (size_t at = 0; at < a.size(); at += kBlock) {
    const std::string_view x = a.substr(at, kBlock), y = b.substr(at, kBlock);
    const bool same = std::memcmp(x.data(), y.data(), x.size()) == 0;
    ReleasePages(x);
    ReleasePages(y);
    if (!same) return false;
  }
  return true;
}

absl::Status CompareTensor(const std::string& name,
                           const NativeCheckpoint& checkpoint,
                           const SafetensorsFolder& hf, int64_t* elements) {
  const v1::TensorEntry& entry = *checkpoint.Find(name);
  const TensorInfo& info = *hf.Find(name);
  const std::vector<int64_t> shape = ShapeOf(entry.global_shape());
  if (DTypeName(info.dtype) != entry.dtype() || info.shape != shape) {
    return absl::DataLossError(absl::StrCat(
        "tensor '", name, "' is ", entry.dtype(), " ", ShapeString(shape),
        " in ", checkpoint.directory(), " but ", DTypeName(info.dtype), " ",
        ShapeString(info.shape), " in ", hf.FileOf(name)->path()));
  }
  const std::string_view hf_bytes = *hf.FileOf(name)->Bytes(name);
  const size_t row_bytes =
      shape.empty() || shape[0] == 0 ? 0 : hf_bytes.size() / shape[0];
  absl::Status status;
  checkpoint.ForEachPiece(
      name, [&](const v1::TensorEntry& piece, std::string_view bytes) {
        const std::string_view expected =
            hf_bytes.substr(piece.row_begin() * row_bytes, bytes.size());
        if (status.ok() && !SameBytes(expected, bytes)) {
          status = absl::DataLossError(absl::StrCat(
              "tensor '", name, "' differs: ", piece.shard_file(), " in ",
              checkpoint.directory(), " against ", hf.FileOf(name)->path()));
        }
      });
  *elements += info.NumElements();
  return status;
}

// The expert form an HF folder's names use; an error when it mixes both.
absl::StatusOr<ExpertForm> DetectExpertForm(const SafetensorsFolder& hf,
                                            const std::string& dir) {
  bool fused = false, per_expert = false;
  for (const std::string& name : hf.TensorNames()) {
    const size_t at = name.find(".mlp.experts.");
    if (at == std::string::npos) continue;
    const char next = name[at + std::strlen(".mlp.experts.")];
    (next >= '0' && next <= '9' ? per_expert : fused) = true;
  }
  if (fused && per_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": routed experts are stored both fused and per expert"));
  }
  return fused ? ExpertForm::kFused : ExpertForm::kPerExpert;
}

// Every key of `hf` is a tensor of the model with the model's shape, and
// every required tensor is there.
absl::Status CheckHfKeys(const SafetensorsFolder& hf, const HfNameMap& map,
                         const std::string& dir) {
  std::vector<std::string> missing, unexpected;
  for (const std::string& name : hf.TensorNames()) {
    const HfTensor* tensor = map.Find(name);
    if (tensor == nullptr) {
      unexpected.push_back(name);
    } else if (hf.Find(name)->shape != tensor->shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(hf.FileOf(name)->path(), ": tensor '", name,
                       "' has shape ", ShapeString(hf.Find(name)->shape),
                       ", config.json implies ", ShapeString(tensor->shape)));
    }
  }
  for (const HfTensor& tensor : map.tensors()) {
    if (tensor.required && hf.Find(tensor.name) == nullptr) {
      missing.push_back(tensor.name);
    }
  }
  return KeyError(dir, missing, unexpected);
}

// The HF tensors `rank` writes, as views into the mapped HF files.
std::vector<ShardTensor> RankTensors(const SafetensorsFolder& hf,
                                     const HfNameMap& map, int rank) {
  std::vector<ShardTensor> tensors;
  for (const HfTensor& param : map.tensors()) {
    const TensorInfo* info = hf.Find(param.name);
    if (info == nullptr || !map.Writes(param.name, rank)) continue;
    const std::string_view bytes = *hf.FileOf(param.name)->Bytes(param.name);
    ShardTensor tensor{param.name, info->dtype, info->shape, -1, 0, bytes};
    if (!info->shape.empty()) {
      const RowRange rows = map.RowsHeld(param.name, rank, info->shape[0]);
      const size_t row_bytes =
          info->shape[0] == 0 ? 0 : bytes.size() / info->shape[0];
      tensor.global_rows = info->shape[0];
      tensor.row_begin = rows.begin;
      tensor.shape[0] = rows.end - rows.begin;
      tensor.bytes =
          bytes.substr(rows.begin * row_bytes, tensor.shape[0] * row_bytes);
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

absl::Status CheckConfigKept(const std::string& kept,
                             const std::string& original,
                             const std::string& where) {
  if (kept != original) {
    return absl::DataLossError(
        absl::StrCat(where, ": config.json differs from the original"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NativeCheckpoint> OpenForExport(const std::string& dir) {
  if (FileExists(JoinPath(dir, kManifestFile))) {
    return NativeCheckpoint::Open(dir);
  }
  absl::StatusOr<int64_t> iteration = ReadLatestIteration(dir);
  if (!iteration.ok()) return iteration.status();
  return NativeCheckpoint::Open(IterationDirectory(dir, *iteration));
}

// The model tensors of `checkpoint` in model order (then any the model does
// not list), after checking that they are exactly the model's.
absl::StatusOr<std::vector<std::string>> ExportOrder(
    const NativeCheckpoint& checkpoint, const HfNameMap& map) {
  std::vector<std::string> order, missing, unexpected;
  for (const HfTensor& tensor : map.tensors()) {
    if (checkpoint.Find(tensor.name) != nullptr) {
      order.push_back(tensor.name);
    } else if (tensor.required) {
      missing.push_back(tensor.name);
    }
  }
  for (const std::string& name : checkpoint.names()) {
    if (IsModelTensor(name) && map.Find(name) == nullptr) {
      unexpected.push_back(name);
    }
  }
  absl::Status keys = KeyError(checkpoint.directory(), missing, unexpected);
  if (!keys.ok()) return keys;
  return order;
}

int64_t EntryBytes(const v1::TensorEntry& entry) {
  int64_t count = 1;
  for (int64_t dim : entry.global_shape()) count *= dim;
  return count * DTypeSize(*DTypeFromName(entry.dtype()));
}

// Consecutive groups of `order` of at most `max_bytes` each (a larger tensor
// gets a shard of its own).
std::vector<std::vector<std::string>> PlanShards(
    const NativeCheckpoint& checkpoint, const std::vector<std::string>& order,
    uint64_t max_bytes) {
  std::vector<std::vector<std::string>> shards(1);
  uint64_t shard_bytes = 0;
  for (const std::string& name : order) {
    const uint64_t bytes = EntryBytes(*checkpoint.Find(name));
    if (!shards.back().empty() && shard_bytes + bytes > max_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(name);
    shard_bytes += bytes;
  }
  return shards;
}

// Streams one HF shard: tensors split over ranks are assembled one at a
// time, the rest written straight from the mapped native shards.
absl::Status WriteHfShard(const NativeCheckpoint& checkpoint,
                          const std::vector<std::string>& names,
                          const std::string& path) {
  std::vector<TensorHeader> headers;
  std::vector<RowRange> rows;
  for (const std::string& name : names) {
    const v1::TensorEntry& entry = *checkpoint.Find(name);
    const std::vector<int64_t> shape = ShapeOf(entry.global_shape());
    headers.push_back({name, *DTypeFromName(entry.dtype()), shape});
    rows.push_back({0, shape.empty() ? 1 : shape[0]});
  }
  return WriteSafetensorsStreamed(
      path, headers, {{"format", "pt"}},
      [&](size_t i, std::string* scratch) {
        return checkpoint.Rows(names[i], rows[i], scratch);
      },
      [&](size_t i, std::string_view) { checkpoint.ReleasePages(names[i]); });
}

}  // namespace

std::string VerifySummary::Text() const {
  return absl::StrCat(tensors, " tensors, ", elements,
                      " elements bitwise equal");
}

absl::StatusOr<VerifySummary> CompareWithHf(const NativeCheckpoint& checkpoint,
                                            const SafetensorsFolder& hf) {
  std::vector<std::string> missing, unexpected;
  std::set<std::string> model_names;
  for (const std::string& name : checkpoint.names()) {
    if (!IsModelTensor(name)) continue;
    model_names.insert(name);
    if (hf.Find(name) == nullptr) missing.push_back(name);
  }
  for (const std::string& name : hf.TensorNames()) {
    if (!model_names.count(name)) unexpected.push_back(name);
  }
  absl::Status keys =
      KeyError(absl::StrCat("comparing ", checkpoint.directory(), " with ",
                            hf.files().front()->path(),
                            " (keys the HF side lacks are missing)"),
               missing, unexpected);
  if (!keys.ok()) return keys;
  VerifySummary summary;
  for (const std::string& name : model_names) {
    absl::Status same = CompareTensor(name, checkpoint, hf, &summary.elements);
    if (!same.ok()) return same;
    ++summary.tensors;
  }
  return summary;
}

absl::StatusOr<VerifySummary> ImportHfCheckpoint(const ImportOptions& options) {
  const std::string config_path = JoinPath(options.hf_dir, kHfConfigName);
  absl::StatusOr<std::string> config_json = ReadFile(config_path);
  if (!config_json.ok()) return config_json.status();
  absl::StatusOr<ModelConfig> config = ParseHfConfigJson(*config_json);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": ", config.status().message()));
  }
  absl::StatusOr<SafetensorsFolder> hf =
      SafetensorsFolder::Open(options.hf_dir);
  if (!hf.ok()) return hf.status();
  absl::StatusOr<ExpertForm> form = DetectExpertForm(*hf, options.hf_dir);
  if (!form.ok()) return form.status();
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(*config, *form, options.layout);
  if (!map.ok()) return map.status();
  if (absl::Status s = CheckHfKeys(*hf, *map, options.hf_dir); !s.ok()) {
    return s;
  }

  for (int rank = 0; rank < map->world_size(); ++rank) {
    const std::vector<ShardTensor> tensors = RankTensors(*hf, *map, rank);
    absl::Status s = SaveShardTensors(options.out_dir, 0, rank, tensors,
                                      /*bytes_are_mapped_files=*/true);
    if (!s.ok()) return s;
  }
  CheckpointInfo info;
  info.layout = options.layout;
  info.world_size = map->world_size();
  info.expert_form = *form;
  info.hf_config_json = *config_json;
  absl::StatusOr<v1::CheckpointManifest> manifest =
      FinalizeCheckpoint(options.out_dir, info);
  if (!manifest.ok()) return manifest.status();

  absl::StatusOr<NativeCheckpoint> written =
      NativeCheckpoint::Open(IterationDirectory(options.out_dir, 0));
  if (!written.ok()) return written.status();
  absl::StatusOr<std::string> kept = written->HfConfigJson();
  if (!kept.ok()) return kept.status();
  if (absl::Status s =
          CheckConfigKept(*kept, *config_json, written->directory());
      !s.ok()) {
    return s;
  }
  return CompareWithHf(*written, *hf);
}

absl::StatusOr<VerifySummary> ExportHfCheckpoint(const ExportOptions& options) {
  absl::StatusOr<NativeCheckpoint> checkpoint =
      OpenForExport(options.checkpoint_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  if (checkpoint->manifest().kind() != kKindFull) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint->directory(), " is a '", checkpoint->manifest().kind(),
        "' checkpoint; only full checkpoints export to HF"));
  }
  absl::StatusOr<std::string> config_json = checkpoint->HfConfigJson();
  if (absl::IsNotFound(config_json.status()) &&
      !options.hf_config_json.empty()) {
    config_json = options.hf_config_json;
  }
  if (!config_json.ok()) return config_json.status();
  absl::StatusOr<ModelConfig> config = ParseHfConfigJson(*config_json);
  if (!config.ok()) return config.status();
  absl::StatusOr<ExpertForm> form =
      ExpertFormFromName(checkpoint->manifest().expert_form());
  if (!form.ok()) return form.status();
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(*config, *form, v1::ParallelLayout());
  if (!map.ok()) return map.status();
  absl::StatusOr<std::vector<std::string>> order =
      ExportOrder(*checkpoint, *map);
  if (!order.ok()) return order.status();

  if (absl::Status s = MakeDirectories(options.out_dir); !s.ok()) return s;
  const std::vector<std::vector<std::string>> shards =
      PlanShards(*checkpoint, *order, options.max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  uint64_t total_size = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    absl::Status s =
        WriteHfShard(*checkpoint, shards[i], JoinPath(options.out_dir, file));
    if (!s.ok()) return s;
    for (const std::string& name : shards[i]) {
      weight_map[name] = file;
      total_size += EntryBytes(*checkpoint->Find(name));
    }
  }
  absl::Status s = WriteFileAtomically(JoinPath(options.out_dir, kHfConfigName),
                                       *config_json);
  // The index goes last: without it the folder is not a checkpoint yet.
  if (s.ok())
    s = WriteSafetensorsIndex(options.out_dir, weight_map, total_size);
  if (!s.ok()) return s;

  absl::StatusOr<std::string> written_config =
      ReadFile(JoinPath(options.out_dir, kHfConfigName));
  if (!written_config.ok()) return written_config.status();
  s = CheckConfigKept(*written_config, *config_json, options.out_dir);
  if (!s.ok()) return s;
  absl::StatusOr<SafetensorsFolder> written =
      SafetensorsFolder::Open(options.out_dir);
  if (!written.ok()) return written.status();
  return CompareWithHf(*checkpoint, *written);
}

}  // namespace glm
