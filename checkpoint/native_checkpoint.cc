#include "checkpoint/native_checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/atomic_file.h"
#include "base/file_util.h"
#include "checkpoint/safetensors_stream.h"
#include "google/protobuf/util/json_util.h"

namespace glm {
namespace {

constexpr char kHfConfigFile[] = "hf_config.json";

std::string ShardName(int rank) {
  return absl::StrFormat("rank_%05d.safetensors", rank);
}

std::string RecordName(int rank) {
  return absl::StrFormat("rank_%05d.json", rank);
}

std::string HashHex(std::string_view bytes) {
  return absl::StrFormat("%016x", XXH64(bytes.data(), bytes.size(), 0));
}

// XXH64 of a whole file, read in blocks so memory stays bounded.
absl::StatusOr<std::string> FileHashHex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> block(1 << 22);
  while (in) {
    in.read(block.data(), block.size());
    XXH64_update(state, block.data(), static_cast<size_t>(in.gcount()));
  }
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return absl::StrFormat("%016x", hash);
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot serialize ", message.GetTypeName(), ": ", status.ToString()));
  }
  return json;
}

template <typename Message>
absl::StatusOr<Message> ReadJsonMessage(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  Message message;
  auto status = google::protobuf::util::JsonStringToMessage(*text, &message);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid ",
                                            message.GetTypeName(), ": ",
                                            status.ToString()));
  }
  return message;
}

// Rows of dim 0 (a scalar counts as one row).
int64_t RowsOf(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : shape[0];
}

std::vector<int64_t> ShapeOf(
    const google::protobuf::RepeatedField<int64_t>& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

v1::TensorEntry EntryOf(const ShardTensor& tensor, const std::string& shard) {
  v1::TensorEntry entry;
  entry.set_name(tensor.name);
  entry.set_dtype(std::string(DTypeName(tensor.dtype)));
  for (int64_t dim : tensor.shape) entry.add_shape(dim);
  std::vector<int64_t> global = tensor.shape;
  if (tensor.global_rows >= 0 && !global.empty()) {
    global[0] = tensor.global_rows;
  }
  for (int64_t dim : global) entry.add_global_shape(dim);
  entry.set_row_begin(tensor.row_begin);
  entry.set_shard_file(shard);
  entry.set_nbytes(static_cast<int64_t>(tensor.bytes.size()));
  return entry;
}

absl::Status RefuseFinishedIteration(const std::string& dir) {
  if (FileExists(JoinPath(dir, kManifestFile))) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " already holds a finished checkpoint; it is never overwritten"));
  }
  return absl::OkStatus();
}

// A rank's record, checked against the shard file it names.
absl::StatusOr<v1::CheckpointManifest> ReadRecord(const std::string& dir,
                                                  int rank) {
  const std::string path = JoinPath(dir, RecordName(rank));
  if (!FileExists(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " has not finished its shard: missing ", path));
  }
  absl::StatusOr<v1::CheckpointManifest> record =
      ReadJsonMessage<v1::CheckpointManifest>(path);
  if (!record.ok()) return record.status();
  if (record->shards_size() != 1 || record->shards(0).rank() != rank) {
    return absl::DataLossError(
        absl::StrCat(path, ": must describe exactly the shard of rank ", rank));
  }
  const v1::ShardFile& shard = record->shards(0);
  absl::StatusOr<int64_t> size = FileSize(JoinPath(dir, shard.path()));
  if (!size.ok()) return size.status();
  if (*size != shard.size()) {
    return absl::DataLossError(absl::StrCat(JoinPath(dir, shard.path()), ": ",
                                            *size, " bytes, its record says ",
                                            shard.size()));
  }
  return record;
}

absl::Status WriteLatest(const std::string& save_dir, int64_t iteration) {
  return WriteFileAtomically(JoinPath(save_dir, kLatestIterationFile),
                             absl::StrCat(iteration, "\n"));
}

// A state tensor's bytes and placement in the global tensor, or an error when
// its shape does not fit the layout.
absl::StatusOr<ShardTensor> PlaceStateTensor(const HfNameMap& map, int rank,
                                             const StateTensor& state) {
  ShardTensor tensor;
  tensor.name = state.name;
  tensor.dtype = DType::kF32;
  tensor.shape = state.tensor->shape();
  tensor.bytes = std::string_view(
      reinterpret_cast<const char*>(state.tensor->data()),
      static_cast<size_t>(state.tensor->numel()) * sizeof(float));
  const HfTensor* param = map.ParamOf(state.name);
  if (param == nullptr) return tensor;
  const RowRange rows = map.RowsHeld(state.name, rank, RowsOf(param->shape));
  std::vector<int64_t> expected = param->shape;
  if (!expected.empty()) expected[0] = rows.end - rows.begin;
  if (tensor.shape != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", state.name, "' on rank ", rank, " has shape ",
                     ShapeString(tensor.shape), "; the layout gives this rank ",
                     ShapeString(expected)));
  }
  tensor.global_rows = RowsOf(param->shape);
  tensor.row_begin = rows.begin;
  return tensor;
}

absl::Status CheckKind(const NativeCheckpoint& checkpoint,
                       const std::string& kind) {
  if (checkpoint.manifest().kind() != kind) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint.directory(), " is a '", checkpoint.manifest().kind(),
        "' checkpoint, not '", kind, "'"));
  }
  return absl::OkStatus();
}

// Part of a tensor to load: rows of a stored tensor, converted to F32 at
// `offset` (in elements) of the destination.
struct LoadSegment {
  std::string name;
  DType dtype;
  RowRange rows;
  int64_t offset;
  int64_t count;
};

// One tensor to load: where it goes and what fills it.
struct LoadPlan {
  Tensor* tensor;
  std::vector<LoadSegment> segments;
};

absl::StatusOr<LoadSegment> PlanSegment(const NativeCheckpoint& checkpoint,
                                        const v1::TensorEntry& entry,
                                        RowRange rows, int64_t offset) {
  absl::StatusOr<DType> dtype = DTypeFromName(entry.dtype());
  if (!dtype.ok()) return dtype.status();
  if (*dtype != DType::kF32 && *dtype != DType::kBF16 &&
      *dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.directory(), ": tensor '", entry.name(),
                     "' is ", entry.dtype(), ", not a float dtype"));
  }
  std::vector<int64_t> shape = ShapeOf(entry.global_shape());
  if (!shape.empty()) shape[0] = rows.end - rows.begin;
  return LoadSegment{entry.name(), *dtype, rows, offset, NumElements(shape)};
}

// A fused expert tensor ("[<state>/]...mlp.experts.gate_up_proj" [E, 2I, H]
// or "...down_proj" [E, H, I]) from a checkpoint holding the experts one by
// one (an HF import in per-expert form): expert e's gate and up rows, or its
// down matrix. NotFound when `name` is not such a tensor or an expert is
// missing.
absl::StatusOr<LoadPlan> PlanFromPerExpert(const NativeCheckpoint& checkpoint,
                                           const StateTensor& state,
                                           RowRange rows) {
  const std::string& name = state.name;
  const bool gate_up = absl::EndsWith(name, ".mlp.experts.gate_up_proj");
  const bool down = absl::EndsWith(name, ".mlp.experts.down_proj");
  const std::vector<int64_t>& shape = state.tensor->shape();
  if ((!gate_up && !down) || shape.size() != 3 ||
      shape[0] != rows.end - rows.begin) {
    return absl::NotFoundError(
        absl::StrCat(checkpoint.directory(), " has no tensor '", name, "'"));
  }
  const std::string base = name.substr(0, name.rfind('.') + 1);
  const std::vector<std::string> parts =
      gate_up ? std::vector<std::string>{"gate_proj.weight", "up_proj.weight"}
              : std::vector<std::string>{"down_proj.weight"};
  const int64_t part_rows = shape[1] / static_cast<int64_t>(parts.size());
  LoadPlan plan{state.tensor, {}};
  for (int64_t e = rows.begin; e < rows.end; ++e) {
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string part = absl::StrCat(base, e, ".", parts[k]);
      const v1::TensorEntry* entry = checkpoint.Find(part);
      if (entry == nullptr) {
        return absl::NotFoundError(
            absl::StrCat(checkpoint.directory(), " has neither '", name,
                         "' nor its per-expert tensor '", part, "'"));
      }
      if (ShapeOf(entry->global_shape()) !=
          std::vector<int64_t>{part_rows, shape[2]}) {
        return absl::InvalidArgumentError(
            absl::StrCat(checkpoint.directory(), ": '", part, "' is ",
                         ShapeString(ShapeOf(entry->global_shape())),
                         ", not a slice of '", name, "' ", ShapeString(shape)));
      }
      const int64_t offset =
          ((e - rows.begin) * shape[1] + k * part_rows) * shape[2];
      absl::StatusOr<LoadSegment> segment =
          PlanSegment(checkpoint, *entry, {0, part_rows}, offset);
      if (!segment.ok()) return segment.status();
      plan.segments.push_back(*std::move(segment));
    }
  }
  return plan;
}

absl::StatusOr<LoadPlan> PlanLoad(const NativeCheckpoint& checkpoint,
                                  const StateTensor& state, RowRange rows) {
  const v1::TensorEntry* entry = checkpoint.Find(state.name);
  if (entry == nullptr) return PlanFromPerExpert(checkpoint, state, rows);
  std::vector<int64_t> expected = ShapeOf(entry->global_shape());
  if (!expected.empty()) expected[0] = rows.end - rows.begin;
  if (state.tensor->shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.directory(), ": tensor '", state.name, "' is ",
        ShapeString(ShapeOf(entry->global_shape())), " (this rank reads rows ",
        rows.begin, "..", rows.end, " as ", ShapeString(expected),
        ") but the model's tensor is ", ShapeString(state.tensor->shape())));
  }
  absl::StatusOr<LoadSegment> segment =
      PlanSegment(checkpoint, *entry, rows, 0);
  if (!segment.ok()) return segment.status();
  return LoadPlan{state.tensor, {*std::move(segment)}};
}

// Copies every planned tensor; the checkpoint is verified, so reading cannot
// fail half way for a reason the plans did not check.
absl::Status RunLoadPlans(const NativeCheckpoint& checkpoint,
                          const std::vector<LoadPlan>& plans) {
  std::string scratch;
  for (const LoadPlan& plan : plans) {
    for (const LoadSegment& segment : plan.segments) {
      absl::StatusOr<std::string_view> bytes =
          checkpoint.Rows(segment.name, segment.rows, &scratch);
      if (!bytes.ok()) return bytes.status();
      absl::Status status =
          ConvertToFloat32(segment.dtype, bytes->data(), segment.count,
                           plan.tensor->data() + segment.offset);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<NativeCheckpoint> OpenLatest(
    const std::string& save_dir, NativeCheckpoint::Hashing hashing =
                                     NativeCheckpoint::Hashing::kEveryShard) {
  absl::StatusOr<int64_t> iteration = ReadLatestIteration(save_dir);
  if (!iteration.ok()) return iteration.status();
  return NativeCheckpoint::Open(IterationDirectory(save_dir, *iteration),
                                hashing);
}

}  // namespace

std::string IterationDirectory(const std::string& save_dir, int64_t iteration) {
  return JoinPath(save_dir, absl::StrFormat("iter_%07d", iteration));
}

absl::StatusOr<int64_t> ReadLatestIteration(const std::string& save_dir) {
  const std::string path = JoinPath(save_dir, kLatestIterationFile);
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint: missing ", path));
  }
  int64_t iteration = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &iteration) ||
      iteration < 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an iteration number: '", *text, "'"));
  }
  return iteration;
}

absl::Status SaveShardTensors(const std::string& save_dir, int64_t iteration,
                              int rank, const std::vector<ShardTensor>& tensors,
                              bool bytes_are_mapped_files) {
  const std::string dir = IterationDirectory(save_dir, iteration);
  if (absl::Status s = RefuseFinishedIteration(dir); !s.ok()) return s;
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  const std::string shard = ShardName(rank);
  std::vector<TensorHeader> headers;
  v1::CheckpointManifest record;
  record.set_iteration(iteration);
  for (const ShardTensor& tensor : tensors) {
    headers.push_back({tensor.name, tensor.dtype, tensor.shape});
    *record.add_tensors() = EntryOf(tensor, shard);
  }
  const std::string path = JoinPath(dir, shard);
  // Each tensor is hashed as it is written, so it is read once.
  absl::Status written_status = WriteSafetensorsStreamed(
      path, headers, {},
      [&tensors](size_t i, std::string*) -> absl::StatusOr<std::string_view> {
        return tensors[i].bytes;
      },
      [&](size_t i, std::string_view bytes) {
        record.mutable_tensors(i)->set_xxh64(HashHex(bytes));
        if (bytes_are_mapped_files) ReleasePages(bytes);
      });
  if (!written_status.ok()) return written_status;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> written =
      SafetensorsFile::Open(path);
  if (!written.ok()) return written.status();
  for (v1::TensorEntry& entry : *record.mutable_tensors()) {
    entry.set_offset((*written)->Find(entry.name())->begin);
  }
  absl::StatusOr<int64_t> size = FileSize(path);
  if (!size.ok()) return size.status();
  absl::StatusOr<std::string> hash = FileHashHex(path);
  if (!hash.ok()) return hash.status();
  v1::ShardFile* file = record.add_shards();
  file->set_path(shard);
  file->set_size(*size);
  file->set_xxh64(*hash);
  file->set_rank(rank);
  absl::StatusOr<std::string> json = ToJson(record);
  if (!json.ok()) return json.status();
  return WriteFileAtomically(JoinPath(dir, RecordName(rank)), *json);
}

absl::Status SaveShard(const std::string& save_dir, const HfNameMap& map,
                       int rank, const TrainingState& state) {
  std::vector<ShardTensor> tensors;
  for (const std::vector<StateTensor>* group :
       {&state.model, &state.optimizer}) {
    for (const StateTensor& entry : *group) {
      if (!map.Writes(entry.name, rank)) continue;
      absl::StatusOr<ShardTensor> tensor = PlaceStateTensor(map, rank, entry);
      if (!tensor.ok()) return tensor.status();
      tensors.push_back(*std::move(tensor));
    }
  }
  return SaveShardTensors(save_dir, state.iteration, rank, tensors);
}

v1::TrainingProgress ProgressOf(const TrainingState& state) {
  v1::TrainingProgress progress;
  progress.set_optimizer_steps(state.optimizer_steps);
  progress.set_skipped_iterations(state.skipped_iterations);
  progress.set_nan_iterations(state.nan_iterations);
  progress.set_data_seed(state.data_seed);
  progress.set_rng_seed(state.rng_seed);
  progress.set_rng_state(state.rng_state);
  return progress;
}

CheckpointInfo InfoOf(const TrainingState& state, const HfNameMap& map,
                      const v1::ParallelLayout& layout) {
  CheckpointInfo info;
  info.iteration = state.iteration;
  info.consumed_samples = state.consumed_samples;
  info.layout = layout;
  info.world_size = map.world_size();
  info.expert_form = map.expert_form();
  info.progress = ProgressOf(state);
  return info;
}

absl::StatusOr<v1::CheckpointManifest> FinalizeCheckpoint(
    const std::string& save_dir, const CheckpointInfo& info) {
  const std::string dir = IterationDirectory(save_dir, info.iteration);
  if (absl::Status s = RefuseFinishedIteration(dir); !s.ok()) return s;
  v1::CheckpointManifest manifest;
  manifest.set_job_id(info.job_id);
  manifest.set_iteration(info.iteration);
  manifest.set_consumed_samples(info.consumed_samples);
  manifest.set_directory(dir);
  *manifest.mutable_layout() = info.layout;
  manifest.set_kind(info.kind);
  manifest.set_created_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  *manifest.mutable_progress() = info.progress;
  manifest.set_world_size(info.world_size);
  manifest.set_expert_form(std::string(ExpertFormName(info.expert_form)));
  std::set<std::pair<std::string, int64_t>> seen;
  for (int rank = 0; rank < info.world_size; ++rank) {
    absl::StatusOr<v1::CheckpointManifest> record = ReadRecord(dir, rank);
    if (!record.ok()) return record.status();
    if (record->iteration() != info.iteration) {
      return absl::DataLossError(
          absl::StrCat(JoinPath(dir, RecordName(rank)), ": iteration ",
                       record->iteration(), ", expected ", info.iteration));
    }
    for (const v1::TensorEntry& entry : record->tensors()) {
      if (!seen.insert({entry.name(), entry.row_begin()}).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", entry.name(), "' rows from ", entry.row_begin(),
            " are written by two ranks (the second: rank ", rank, ")"));
      }
      *manifest.add_tensors() = entry;
    }
    *manifest.add_shards() = record->shards(0);
  }
  if (!info.hf_config_json.empty()) {
    absl::Status s =
        WriteFileAtomically(JoinPath(dir, kHfConfigFile), info.hf_config_json);
    if (!s.ok()) return s;
    manifest.set_hf_config_file(kHfConfigFile);
    manifest.set_hf_config_xxh64(HashHex(info.hf_config_json));
  }
  absl::StatusOr<std::string> json = ToJson(manifest);
  if (!json.ok()) return json.status();
  // The manifest goes last: its presence says every shard is complete.
  if (absl::Status s = WriteFileAtomically(JoinPath(dir, kManifestFile), *json);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteLatest(save_dir, info.iteration); !s.ok()) {
    return s;
  }
  return manifest;
}

absl::StatusOr<v1::CheckpointManifest> SaveCheckpoint(
    const std::string& save_dir, const HfNameMap& map,
    const v1::ParallelLayout& layout, const TrainingState& state) {
  if (map.world_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SaveCheckpoint is for world size 1; this layout has ",
        map.world_size(), " ranks: use SaveShard and FinalizeCheckpoint"));
  }
  if (absl::Status s = SaveShard(save_dir, map, 0, state); !s.ok()) return s;
  return FinalizeCheckpoint(save_dir, InfoOf(state, map, layout));
}

absl::StatusOr<v1::CheckpointManifest> SaveLoraCheckpoint(
    const std::string& save_dir, int64_t iteration,
    const std::vector<StateTensor>& adapters) {
  std::vector<ShardTensor> tensors;
  for (const StateTensor& adapter : adapters) {
    ShardTensor tensor;
    tensor.name = adapter.name;
    tensor.shape = adapter.tensor->shape();
    tensor.bytes = std::string_view(
        reinterpret_cast<const char*>(adapter.tensor->data()),
        static_cast<size_t>(adapter.tensor->numel()) * sizeof(float));
    tensors.push_back(std::move(tensor));
  }
  if (absl::Status s = SaveShardTensors(save_dir, iteration, 0, tensors);
      !s.ok()) {
    return s;
  }
  CheckpointInfo info;
  info.iteration = iteration;
  info.kind = kKindLora;
  return FinalizeCheckpoint(save_dir, info);
}

absl::StatusOr<NativeCheckpoint> NativeCheckpoint::Open(
    const std::string& iteration_dir, Hashing hashing) {
  NativeCheckpoint checkpoint;
  checkpoint.dir_ = iteration_dir;
  const std::string manifest_path = JoinPath(iteration_dir, kManifestFile);
  if (!FileExists(manifest_path)) {
    return absl::NotFoundError(
        absl::StrCat("no manifest ", manifest_path,
                     ": the checkpoint is missing or its save did not finish"));
  }
  absl::StatusOr<v1::CheckpointManifest> manifest =
      ReadJsonMessage<v1::CheckpointManifest>(manifest_path);
  if (!manifest.ok()) return manifest.status();
  checkpoint.manifest_ =
      std::make_unique<v1::CheckpointManifest>(*std::move(manifest));
  const v1::CheckpointManifest& m = *checkpoint.manifest_;
  const std::string expected_dir = absl::StrFormat("iter_%07d", m.iteration());
  if (!absl::EndsWith(absl::StripSuffix(iteration_dir, "/"), expected_dir)) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": manifest of iteration ", m.iteration(),
                     " does not belong in ", iteration_dir));
  }
  if (m.shards_size() != m.world_size() || m.world_size() < 1) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": ", m.shards_size(),
                     " shards listed for world size ", m.world_size()));
  }
  if (absl::Status s = checkpoint.VerifyShards(hashing); !s.ok()) return s;
  if (absl::Status s = checkpoint.IndexPieces(); !s.ok()) return s;
  if (!m.hf_config_file().empty()) {
    absl::StatusOr<std::string> config = checkpoint.HfConfigJson();
    if (!config.ok()) return config.status();
  }
  return checkpoint;
}

absl::Status NativeCheckpoint::VerifyShards(Hashing hashing) {
  std::map<std::string, int> entries_per_shard;
  for (const v1::TensorEntry& entry : manifest_->tensors()) {
    ++entries_per_shard[entry.shard_file()];
  }
  for (const v1::ShardFile& shard : manifest_->shards()) {
    const std::string path = JoinPath(dir_, shard.path());
    if (shards_.count(shard.path())) {
      return absl::DataLossError(
          absl::StrCat(dir_, ": shard ", shard.path(), " listed twice"));
    }
    absl::StatusOr<int64_t> size = FileSize(path);
    if (!size.ok()) return size.status();
    if (*size != shard.size()) {
      return absl::DataLossError(absl::StrCat(
          path, ": ", *size, " bytes but the manifest says ", shard.size(),
          *size < shard.size() ? " (truncated)" : ""));
    }
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Open(path);
    if (hashing == Hashing::kEveryShard) {
      absl::StatusOr<std::string> hash = FileHashHex(path);
      if (!hash.ok()) return hash.status();
      if (*hash != shard.xxh64()) {
        return absl::DataLossError(absl::StrCat(
            path, ": XXH64 ", *hash, " but the manifest says ", shard.xxh64(),
            " (corrupted",
            file.ok() ? CorruptTensors(**file) : "; header unreadable", ")"));
      }
    }
    if (!file.ok()) return file.status();
    if (static_cast<int>((*file)->tensors().size()) !=
        entries_per_shard[shard.path()]) {
      return absl::DataLossError(absl::StrCat(
          path, ": holds ", (*file)->tensors().size(),
          " tensors but the manifest lists ", entries_per_shard[shard.path()]));
    }
    shards_[shard.path()] = std::shared_ptr<SafetensorsFile>(*std::move(file));
  }
  return absl::OkStatus();
}

std::string NativeCheckpoint::CorruptTensors(
    const SafetensorsFile& file) const {
  std::vector<std::string> names;
  for (const v1::TensorEntry& entry : manifest_->tensors()) {
    if (file.path() != JoinPath(dir_, entry.shard_file())) continue;
    absl::StatusOr<std::string_view> bytes = file.Bytes(entry.name());
    if (!bytes.ok() || HashHex(*bytes) != entry.xxh64()) {
      names.push_back(absl::StrCat("'", entry.name(), "'"));
    }
  }
  if (names.empty()) return " outside the tensors' data";
  return absl::StrCat(" in tensor ", absl::StrJoin(names, ", "));
}

absl::Status NativeCheckpoint::IndexPieces() {
  for (const v1::TensorEntry& entry : manifest_->tensors()) {
    const SafetensorsFile& file = *shards_.at(entry.shard_file());
    const TensorInfo* info = file.Find(entry.name());
    if (info == nullptr || DTypeName(info->dtype) != entry.dtype() ||
        info->shape != ShapeOf(entry.shape()) ||
        static_cast<int64_t>(info->begin) != entry.offset() ||
        static_cast<int64_t>(info->NumBytes()) != entry.nbytes()) {
      return absl::DataLossError(absl::StrCat(
          file.path(), ": tensor '", entry.name(),
          "' does not match the manifest (", entry.dtype(), " ",
          ShapeString(ShapeOf(entry.shape())), " at ", entry.offset(), ")"));
    }
    if (!pieces_.count(entry.name())) names_.push_back(entry.name());
    pieces_[entry.name()].push_back({&entry, *file.Bytes(entry.name())});
  }
  for (auto& [name, pieces] : pieces_) {
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return a.entry->row_begin() < b.entry->row_begin();
    });
    const v1::TensorEntry& first = *pieces.front().entry;
    const std::vector<int64_t> global = ShapeOf(first.global_shape());
    int64_t next_row = 0;
    for (const Piece& piece : pieces) {
      std::vector<int64_t> shape = ShapeOf(piece.entry->shape());
      if (!shape.empty()) shape[0] = global.empty() ? 0 : global[0];
      if (piece.entry->dtype() != first.dtype() ||
          ShapeOf(piece.entry->global_shape()) != global || shape != global ||
          piece.entry->row_begin() != next_row) {
        return absl::DataLossError(absl::StrCat(
            dir_, ": tensor '", name, "' has an entry in ",
            piece.entry->shard_file(), " that does not continue it at row ",
            next_row, " (", piece.entry->dtype(), " ",
            ShapeString(ShapeOf(piece.entry->shape())), " from row ",
            piece.entry->row_begin(), ")"));
      }
      next_row += RowsOf(ShapeOf(piece.entry->shape()));
    }
    if (next_row != RowsOf(global)) {
      return absl::DataLossError(absl::StrCat(
          dir_, ": tensor '", name, "' ", ShapeString(global), " has rows ",
          next_row, "..", RowsOf(global), " in no shard"));
    }
  }
  return absl::OkStatus();
}

const v1::TensorEntry* NativeCheckpoint::Find(const std::string& name) const {
  auto it = pieces_.find(name);
  return it == pieces_.end() ? nullptr : it->second.front().entry;
}

absl::StatusOr<std::string_view> NativeCheckpoint::Rows(
    const std::string& name, RowRange rows, std::string* scratch) const {
  auto it = pieces_.find(name);
  if (it == pieces_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir_, " has no tensor '", name, "'"));
  }
  const int64_t total =
      RowsOf(ShapeOf(it->second.front().entry->global_shape()));
  if (rows.begin < 0 || rows.end > total || rows.begin > rows.end) {
    return absl::OutOfRangeError(
        absl::StrCat(dir_, ": rows ", rows.begin, "..", rows.end,
                     " of tensor '", name, "' outside its ", total, " rows"));
  }
  std::vector<std::string_view> parts;
  for (const Piece& piece : it->second) {
    const int64_t begin = piece.entry->row_begin();
    const int64_t count = RowsOf(ShapeOf(piece.entry->shape()));
    const int64_t from = std::max(begin, rows.begin);
    const int64_t to = std::min(begin + count, rows.end);
    if (from >= to) continue;
    const size_t row_bytes = count == 0 ? 0 : piece.bytes.size() / count;
    parts.push_back(piece.bytes.substr((from - begin) * row_bytes,
                                       (to - from) * row_bytes));
  }
  if (parts.size() == 1) return parts.front();
  scratch->clear();
  for (std::string_view part : parts) scratch->append(part);
  return std::string_view(*scratch);
}

absl::Status NativeCheckpoint::VerifyRows(const std::string& name,
                                          RowRange rows) const {
  auto it = pieces_.find(name);
  if (it == pieces_.end()) return absl::OkStatus();  // Rows() reports it
  for (const Piece& piece : it->second) {
    const int64_t begin = piece.entry->row_begin();
    const int64_t end = begin + RowsOf(ShapeOf(piece.entry->shape()));
    if (std::max(begin, rows.begin) >= std::min(end, rows.end)) continue;
    if (const std::string hash = HashHex(piece.bytes);
        hash != piece.entry->xxh64()) {
      return absl::DataLossError(
          absl::StrCat(JoinPath(dir_, piece.entry->shard_file()), ": tensor '",
                       name, "': XXH64 ", hash, " but the manifest says ",
                       piece.entry->xxh64(), " (corrupted)"));
    }
  }
  return absl::OkStatus();
}

void NativeCheckpoint::ReleasePages(const std::string& name) const {
  auto it = pieces_.find(name);
  if (it == pieces_.end()) return;
  for (const Piece& piece : it->second) glm::ReleasePages(piece.bytes);
}

absl::StatusOr<std::string> NativeCheckpoint::HfConfigJson() const {
  if (manifest_->hf_config_file().empty()) {
    return absl::NotFoundError(absl::StrCat(dir_, " keeps no HF config.json"));
  }
  const std::string path = JoinPath(dir_, manifest_->hf_config_file());
  absl::StatusOr<std::string> config = ReadFile(path);
  if (!config.ok()) return config.status();
  if (HashHex(*config) != manifest_->hf_config_xxh64()) {
    return absl::DataLossError(absl::StrCat(path, ": XXH64 ", HashHex(*config),
                                            " but the manifest says ",
                                            manifest_->hf_config_xxh64()));
  }
  return config;
}

absl::StatusOr<v1::CheckpointManifest> LoadCheckpoint(
    const std::string& save_dir, const HfNameMap& map, int rank,
    TrainingState* state) {
  // A rank hashes only the pieces it reads, all before it loads any.
  absl::StatusOr<NativeCheckpoint> checkpoint =
      OpenLatest(save_dir, NativeCheckpoint::Hashing::kReadPieces);
  if (!checkpoint.ok()) return checkpoint.status();
  if (absl::Status s = CheckKind(*checkpoint, kKindFull); !s.ok()) return s;
  std::vector<LoadPlan> plans;
  for (const std::vector<StateTensor>* group :
       {&state->model, &state->optimizer}) {
    for (const StateTensor& tensor : *group) {
      // Global rows from the checkpoint, or from the model for a fused
      // expert tensor stored per expert.
      const v1::TensorEntry* entry = checkpoint->Find(tensor.name);
      const HfTensor* param = map.ParamOf(tensor.name);
      int64_t rows = 0;
      if (entry != nullptr) {
        rows = RowsOf(ShapeOf(entry->global_shape()));
      } else if (param != nullptr) {
        rows = RowsOf(param->shape);
      }
      absl::StatusOr<LoadPlan> plan =
          PlanLoad(*checkpoint, tensor, map.RowsHeld(tensor.name, rank, rows));
      if (!plan.ok()) return plan.status();
      plans.push_back(*std::move(plan));
    }
  }
  for (const LoadPlan& plan : plans) {
    for (const LoadSegment& segment : plan.segments) {
      if (absl::Status s = checkpoint->VerifyRows(segment.name, segment.rows);
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s = RunLoadPlans(*checkpoint, plans); !s.ok()) return s;
  const v1::CheckpointManifest& manifest = checkpoint->manifest();
  const v1::TrainingProgress& progress = manifest.progress();
  state->iteration = manifest.iteration();
  state->consumed_samples = manifest.consumed_samples();
  state->optimizer_steps = progress.optimizer_steps();
  state->skipped_iterations = progress.skipped_iterations();
  state->nan_iterations = progress.nan_iterations();
  state->data_seed = progress.data_seed();
  state->rng_seed = progress.rng_seed();
  state->rng_state = progress.rng_state();
  return manifest;
}

absl::StatusOr<v1::CheckpointManifest> LoadLoraCheckpoint(
    const std::string& save_dir, const std::vector<StateTensor>& adapters) {
  absl::StatusOr<NativeCheckpoint> checkpoint = OpenLatest(save_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  if (absl::Status s = CheckKind(*checkpoint, kKindLora); !s.ok()) return s;
  std::vector<LoadPlan> plans;
  for (const StateTensor& adapter : adapters) {
    absl::StatusOr<LoadPlan> plan =
        PlanLoad(*checkpoint, adapter, {0, RowsOf(adapter.tensor->shape())});
    if (!plan.ok()) return plan.status();
    plans.push_back(*std::move(plan));
  }
  if (absl::Status s = RunLoadPlans(*checkpoint, plans); !s.ok()) return s;
  return checkpoint->manifest();
}

}  // namespace glm
