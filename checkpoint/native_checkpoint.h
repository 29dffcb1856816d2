// Native training checkpoints: <save>/iter_NNNNNNN/ with one safetensors shard
// per rank (rank_NNNNN.safetensors, tensors in their own dtype) and
// manifest.json, written last, naming every tensor globally (shape, dtype,
// shard, offset, XXH64 per tensor and per shard), the parallel layout and the
// scalar training state. <save>/latest_checkpointed_iteration.txt is replaced
// (temp + rename) only after the manifest exists.
//
// A save is three steps so that ranks of a job can write in parallel:
// SaveShard on every rank (its shard, then a small rank_NNNNN.json record of
// what the shard holds), a barrier done by the caller, then FinalizeCheckpoint
// on rank 0 (checks every record and shard, writes the manifest, then
// latest). A crash at any point leaves the previous checkpoint and `latest`
// as they were: an iteration directory without a manifest is never loaded.
//
// Loading verifies everything first (manifest, shard sizes and checksums,
// each entry against its shard's header, tensors complete, the caller's names
// and shapes) and only then copies into the caller's tensors. Tensors are
// named globally, so a checkpoint saved under one PP/EP layout loads under
// another: each rank reads the rows it holds from whichever shards have them.
#ifndef GLM_CHECKPOINT_NATIVE_CHECKPOINT_H_
#define GLM_CHECKPOINT_NATIVE_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/training_state.h"
#include "proto/checkpoint.pb.h"

namespace glm {

inline constexpr char kLatestIterationFile[] =
    "latest_checkpointed_iteration.txt";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kKindFull[] = "full";
inline constexpr char kKindLora[] = "lora";

// <save>/iter_0000042.
std::string IterationDirectory(const std::string& save_dir, int64_t iteration);
// The iteration in <save>/latest_checkpointed_iteration.txt; NotFound when
// there is none.
absl::StatusOr<int64_t> ReadLatestIteration(const std::string& save_dir);

// One tensor a rank writes, as raw bytes in its own dtype. A slice holds rows
// [row_begin, row_begin + shape[0]) of a tensor of `global_rows` rows.
struct ShardTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t global_rows = -1;  // -1: the whole tensor
  int64_t row_begin = 0;
  std::string_view bytes;
};

// Writes rank `rank`'s shard of iteration `iteration` and its record.
// FailedPrecondition when that iteration already has a manifest (a finished
// checkpoint is never overwritten). With `bytes_are_mapped_files` (views into
// read-only file mappings) each tensor's pages are released once written.
absl::Status SaveShardTensors(const std::string& save_dir, int64_t iteration,
                              int rank, const std::vector<ShardTensor>& tensors,
                              bool bytes_are_mapped_files = false);

// SaveShardTensors for a trainer's state: the model and optimizer tensors
// that `map` says `rank` writes, as F32, expert slices placed by the rank's
// expert-parallel coordinate. Errors name a tensor whose shape does not fit
// the layout. Every rank calls it, also one that writes nothing (a data-
// parallel replica): FinalizeCheckpoint waits for each rank's record.
absl::Status SaveShard(const std::string& save_dir, const HfNameMap& map,
                       int rank, const TrainingState& state);

// What rank 0 adds to the shards' records.
struct CheckpointInfo {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  std::string kind = kKindFull;
  std::string job_id;
  v1::ParallelLayout layout;
  int world_size = 1;
  ExpertForm expert_form = ExpertForm::kPerExpert;
  v1::TrainingProgress progress;
  // config.json bytes to keep beside the shards; empty for none.
  std::string hf_config_json;
};

// The progress part of a trainer's state.
v1::TrainingProgress ProgressOf(const TrainingState& state);
// CheckpointInfo of a trainer's state under `layout`.
CheckpointInfo InfoOf(const TrainingState& state, const HfNameMap& map,
                      const v1::ParallelLayout& layout);

// Rank 0, after every rank's SaveShard returned: checks each rank's record
// against its shard, writes the manifest (last), then points `latest` at it.
// Returns the manifest.
absl::StatusOr<v1::CheckpointManifest> FinalizeCheckpoint(
    const std::string& save_dir, const CheckpointInfo& info);

// World size 1: SaveShard and FinalizeCheckpoint for rank 0.
absl::StatusOr<v1::CheckpointManifest> SaveCheckpoint(
    const std::string& save_dir, const HfNameMap& map,
    const v1::ParallelLayout& layout, const TrainingState& state);

// LoRA: only `adapters` (names chosen by the caller, F32), kind "lora", world
// size 1.
absl::StatusOr<v1::CheckpointManifest> SaveLoraCheckpoint(
    const std::string& save_dir, int64_t iteration,
    const std::vector<StateTensor>& adapters);

// A verified checkpoint iteration directory: opening checks the manifest, each
// shard's size and XXH64, each entry against its shard's header and its own
// XXH64, and that the entries of each tensor cover its rows exactly once.
class NativeCheckpoint {
 public:
  // kEveryShard hashes every shard file whole at open; kReadPieces checks
  // sizes and headers only and leaves the checksums to VerifyRows, so that a
  // rank hashes only what it reads (one rank of a large model reads a small
  // part of the checkpoint).
  enum class Hashing { kEveryShard, kReadPieces };
  static absl::StatusOr<NativeCheckpoint> Open(
      const std::string& iteration_dir, Hashing hashing = Hashing::kEveryShard);
  // DataLoss naming the shard and tensor unless every stored piece of `name`
  // overlapping `rows` has the XXH64 its manifest entry records.
  absl::Status VerifyRows(const std::string& name, RowRange rows) const;

  const v1::CheckpointManifest& manifest() const { return *manifest_; }
  const std::string& directory() const { return dir_; }
  // Global tensor names in manifest order.
  const std::vector<std::string>& names() const { return names_; }
  // The first entry of `name` (for dtype and global shape); nullptr if absent.
  const v1::TensorEntry* Find(const std::string& name) const;
  // Raw bytes of rows `rows` of tensor `name`: a view into the mapped shard
  // when one entry holds them all, else assembled in `scratch`. NotFound for
  // an absent tensor, OutOfRange for rows outside it.
  absl::StatusOr<std::string_view> Rows(const std::string& name, RowRange rows,
                                        std::string* scratch) const;
  // Calls `visit(entry, bytes)` for each stored piece of `name`, in row order.
  template <typename Visit>
  void ForEachPiece(const std::string& name, Visit visit) const;
  // Releases the mapped pages of tensor `name` (see ReleasePages in
  // safetensors_stream.h): a streaming pass calls it once done with a tensor.
  void ReleasePages(const std::string& name) const;
  // The stored config.json bytes; NotFound when the checkpoint has none.
  absl::StatusOr<std::string> HfConfigJson() const;

 private:
  // Sizes (and, with kEveryShard, checksums) of the shards, then their
  // headers.
  absl::Status VerifyShards(Hashing hashing);
  // " in tensor 'a', 'b'": the entries of `file` whose bytes changed.
  std::string CorruptTensors(const SafetensorsFile& file) const;
  // Groups entries by tensor and checks each tensor's rows are complete.
  absl::Status IndexPieces();

  struct Piece {
    const v1::TensorEntry* entry;
    std::string_view bytes;
  };
  std::string dir_;
  // Held by pointer: pieces_ point into it, and it must not move with the
  // object.
  std::unique_ptr<v1::CheckpointManifest> manifest_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards_;
  std::vector<std::string> names_;
  std::map<std::string, std::vector<Piece>> pieces_;
};

template <typename Visit>
void NativeCheckpoint::ForEachPiece(const std::string& name,
                                    Visit visit) const {
  auto it = pieces_.find(name);
  if (it == pieces_.end()) return;
  for (const Piece& piece : it->second) visit(*piece.entry, piece.bytes);
}

// Loads the latest checkpoint under `save_dir` into `state` for `rank` of the
// layout `map` describes: every model and optimizer tensor of `state` must be
// in the checkpoint with the shape the rank holds (F32, F16 and BF16 stored
// values are read as F32). A fused expert tensor (mlp.experts.gate_up_proj,
// mlp.experts.down_proj) is also filled from per-expert tensors (an HF import
// in that form). Nothing in `state` changes unless everything checks out.
// Returns the manifest loaded.
absl::StatusOr<v1::CheckpointManifest> LoadCheckpoint(
    const std::string& save_dir, const HfNameMap& map, int rank,
    TrainingState* state);

// Loads a LoRA checkpoint's adapters (the latest under `save_dir`); every
// adapter must be there with its shape.
absl::StatusOr<v1::CheckpointManifest> LoadLoraCheckpoint(
    const std::string& save_dir, const std::vector<StateTensor>& adapters);

}  // namespace glm

#endif  // GLM_CHECKPOINT_NATIVE_CHECKPOINT_H_
