#include "checkpoint/native_checkpoint.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

namespace fs = std::filesystem;

// The global value of every tensor: random, fixed by its name.
Tensor GlobalValue(const std::string& name, const std::vector<int64_t>& shape) {
  Tensor tensor(shape);
  std::mt19937 random(std::hash<std::string>()(name));
  std::normal_distribution<float> normal;
  for (float& value : tensor.values()) value = normal(random);
  return tensor;
}

Tensor RowsOfTensor(const Tensor& global, RowRange rows) {
  std::vector<int64_t> shape = global.shape();
  if (shape.empty()) return global;
  const int64_t row_size = global.numel() / shape[0];
  shape[0] = rows.end - rows.begin;
  Tensor slice(shape);
  std::copy(global.data() + rows.begin * row_size,
            global.data() + rows.end * row_size, slice.data());
  return slice;
}

// One rank's training state under `map`: the tensors the rank holds (dense
// replicas included), with Adam moments for a few of them.
class RankState {
 public:
  // `ep` is the layout's expert-parallel size (8 experts).
  RankState(const HfNameMap& map, int rank, int ep, bool zero) {
    const RankCoordinates& at = map.coordinates(rank);
    for (const HfTensor& param : map.tensors()) {
      if (!param.required || param.pp_rank != at.pp) continue;
      if (param.expert >= 0 && param.expert / (8 / ep) != at.ep) continue;
      Add(map, rank, param.name, param.shape, zero, &state_.model);
      if (param.name.find("layers.1.") != std::string::npos) {
        Add(map, rank, "exp_avg/" + param.name, param.shape, zero,
            &state_.optimizer);
      }
    }
    if (!zero) {
      state_.iteration = 7;
      state_.consumed_samples = 56;
      state_.optimizer_steps = 6;
      state_.skipped_iterations = 1;
      state_.nan_iterations = 1;
      state_.data_seed = 1234;
      state_.rng_seed = 99;
      std::mt19937_64 rng(99);
      rng();
      std::ostringstream text;
      text << rng;
      state_.rng_state = text.str();
    }
  }
  TrainingState& state() { return state_; }
  const Tensor& tensor(const std::string& name) const {
    return *tensors_.at(name);
  }

 private:
  void Add(const HfNameMap& map, int rank, const std::string& name,
           const std::vector<int64_t>& shape, bool zero,
           std::vector<StateTensor>* group) {
    const RowRange rows = map.RowsHeld(name, rank, shape[0]);
    Tensor value = RowsOfTensor(GlobalValue(name, shape), rows);
    if (zero) value.SetZero();
    tensors_[name] = std::make_unique<Tensor>(std::move(value));
    group->push_back({name, tensors_[name].get()});
  }

  std::map<std::string, std::unique_ptr<Tensor>> tensors_;
  TrainingState state_;
};

void ExpectSameTensors(RankState& expected, RankState& actual) {
  ASSERT_EQ(expected.state().model.size(), actual.state().model.size());
  for (auto* group : {&expected.state().model, &expected.state().optimizer}) {
    for (const StateTensor& entry : *group) {
      const Tensor& want = *entry.tensor;
      const Tensor& got = actual.tensor(entry.name);
      ASSERT_EQ(want.shape(), got.shape()) << entry.name;
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.numel() * 4), 0)
          << entry.name;
    }
  }
}

absl::Status SaveAllRanks(const std::string& dir, const HfNameMap& map,
                          const v1::ParallelLayout& layout) {
  for (int rank = 0; rank < map.world_size(); ++rank) {
    RankState rank_state(map, rank, layout.ep(), false);
    absl::Status status = SaveShard(dir, map, rank, rank_state.state());
    if (!status.ok()) return status;
  }
  RankState rank0(map, 0, layout.ep(), false);
  return FinalizeCheckpoint(dir, InfoOf(rank0.state(), map, layout)).status();
}

TEST(NativeCheckpointTest, SaveAndLoadRestoresEveryTensorAndScalar) {
  const std::string dir = NewTempDir();
  const HfNameMap map =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  RankState saved(map, 0, 1, false);
  absl::StatusOr<v1::CheckpointManifest> manifest =
      SaveCheckpoint(dir, map, PipelineExpertLayout(1, 1), saved.state());
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->iteration(), 7);
  EXPECT_EQ(manifest->shards_size(), 1);
  EXPECT_EQ(manifest->shards(0).xxh64().size(), 16u);
  EXPECT_TRUE(fs::exists(dir + "/iter_0000007/manifest.json"));
  EXPECT_EQ(*ReadLatestIteration(dir), 7);

  RankState loaded(map, 0, 1, true);
  absl::StatusOr<v1::CheckpointManifest> read =
      LoadCheckpoint(dir, map, 0, &loaded.state());
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameTensors(saved, loaded);
  const TrainingState& s = loaded.state();
  EXPECT_EQ(s.iteration, 7);
  EXPECT_EQ(s.consumed_samples, 56);
  EXPECT_EQ(s.optimizer_steps, 6);
  EXPECT_EQ(s.skipped_iterations, 1);
  EXPECT_EQ(s.nan_iterations, 1);
  EXPECT_EQ(s.data_seed, 1234u);
  EXPECT_EQ(s.rng_seed, 99u);
  EXPECT_EQ(s.rng_state, saved.state().rng_state);
  std::mt19937_64 resumed;
  std::istringstream(s.rng_state) >> resumed;
  std::mt19937_64 uninterrupted(99);
  uninterrupted();
  EXPECT_EQ(resumed(), uninterrupted());

  // A finished checkpoint is never overwritten.
  absl::Status again = SaveShard(dir, map, 0, saved.state());
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
}

TEST(NativeCheckpointTest, ReshardsFromPp2Ep2ToPp1Ep1AndBack) {
  for (ExpertForm form : {ExpertForm::kFused, ExpertForm::kPerExpert}) {
    const std::string dir = NewTempDir();
    const v1::ParallelLayout wide = PipelineExpertLayout(2, 2, "Etttttt|ttmL");
    const HfNameMap saved_map = TinyNameMap(form, wide);
    ASSERT_EQ(saved_map.world_size(), 4);
    ASSERT_TRUE(SaveAllRanks(dir, saved_map, wide).ok());
    absl::StatusOr<NativeCheckpoint> checkpoint =
        NativeCheckpoint::Open(IterationDirectory(dir, 7));
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_EQ(checkpoint->manifest().shards_size(), 4);
    EXPECT_EQ(checkpoint->manifest().layout().layout(), "Etttttt|ttmL");

    const HfNameMap single = TinyNameMap(form, PipelineExpertLayout(1, 1));
    RankState expected(single, 0, 1, false);
    RankState loaded(single, 0, 1, true);
    absl::StatusOr<v1::CheckpointManifest> read =
        LoadCheckpoint(dir, single, 0, &loaded.state());
    ASSERT_TRUE(read.ok()) << read.status();
    ExpectSameTensors(expected, loaded);

    // And back: rank 3 (pp 1, ep 1) of the wide layout reads its slices.
    RankState expected3(saved_map, 3, 2, false);
    RankState loaded3(saved_map, 3, 2, true);
    read = LoadCheckpoint(dir, saved_map, 3, &loaded3.state());
    ASSERT_TRUE(read.ok()) << read.status();
    ExpectSameTensors(expected3, loaded3);
  }
}

// Flips one bit of the byte at `offset` of `path`.
void FlipByte(const std::string& path, int64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x10;
  file.seekp(offset);
  file.write(&byte, 1);
}

// A rank checks the checksums of what it reads only: a corrupted tensor in
// rank 3's shard stops rank 3's load (naming it) and a whole-checkpoint open,
// not rank 0's.
TEST(NativeCheckpointTest, ARankHashesOnlyThePiecesItReads) {
  const std::string dir = NewTempDir();
  const v1::ParallelLayout wide = PipelineExpertLayout(2, 2, "Etttttt|ttmL");
  const HfNameMap map = TinyNameMap(ExpertForm::kFused, wide);
  ASSERT_TRUE(SaveAllRanks(dir, map, wide).ok());
  const std::string iteration = IterationDirectory(dir, 7);
  absl::StatusOr<NativeCheckpoint> checkpoint =
      NativeCheckpoint::Open(iteration);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const v1::TensorEntry* victim = nullptr;
  for (const v1::TensorEntry& entry : checkpoint->manifest().tensors()) {
    if (entry.shard_file() == "rank_00003.safetensors" &&
        absl::StrContains(entry.name(), "model.layers.7.") &&
        entry.nbytes() > 32) {
      victim = &entry;
      break;
    }
  }
  ASSERT_NE(victim, nullptr);
  const std::string name = victim->name();
  const std::string shard = iteration + "/rank_00003.safetensors";
  std::ifstream in(shard, std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  in.close();
  FlipByte(shard, 8 + header_size + victim->offset() + 17);

  RankState rank0(map, 0, 2, true);
  EXPECT_TRUE(LoadCheckpoint(dir, map, 0, &rank0.state()).ok());
  RankState rank3(map, 3, 2, true);
  const absl::Status status =
      LoadCheckpoint(dir, map, 3, &rank3.state()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), name)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "XXH64")) << status;
  EXPECT_FALSE(NativeCheckpoint::Open(iteration).ok());
}

TEST(NativeCheckpointTest, FinalizeWaitsForEveryRank) {
  const std::string dir = NewTempDir();
  const v1::ParallelLayout wide = PipelineExpertLayout(2, 2, "Etttttt|ttmL");
  const HfNameMap map = TinyNameMap(ExpertForm::kFused, wide);
  RankState rank0(map, 0, 2, false);
  ASSERT_TRUE(SaveShard(dir, map, 0, rank0.state()).ok());
  absl::StatusOr<v1::CheckpointManifest> manifest =
      FinalizeCheckpoint(dir, InfoOf(rank0.state(), map, wide));
  ASSERT_FALSE(manifest.ok());
  EXPECT_TRUE(absl::StrContains(manifest.status().message(), "rank 1"))
      << manifest.status();
  EXPECT_FALSE(fs::exists(IterationDirectory(dir, 7) + "/manifest.json"));
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    ASSERT_TRUE(
        SaveCheckpoint(dir_, map_, PipelineExpertLayout(1, 1), saved_.state())
            .ok());
    shard_ = IterationDirectory(dir_, 7) + "/rank_00000.safetensors";
  }

  // Loads into a zeroed state; on failure checks nothing was written.
  absl::Status Load() {
    RankState target(map_, 0, 1, true);
    absl::Status status =
        LoadCheckpoint(dir_, map_, 0, &target.state()).status();
    if (!status.ok()) {
      for (const StateTensor& entry : target.state().model) {
        for (float value : entry.tensor->HostValues()) EXPECT_EQ(value, 0.f);
      }
      EXPECT_EQ(target.state().iteration, 0);
    }
    return status;
  }

  HfNameMap map_ =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  RankState saved_{map_, 0, 1, false};
  std::string dir_;
  std::string shard_;
};

TEST_F(CorruptionTest, TruncatedShard) {
  fs::resize_file(shard_, fs::file_size(shard_) - 100);
  absl::Status status = Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), "rank_00000.safetensors"));
  EXPECT_TRUE(absl::StrContains(status.message(), "truncated")) << status;
}

TEST_F(CorruptionTest, FlippedByteNamesTheTensor) {
  absl::StatusOr<NativeCheckpoint> checkpoint =
      NativeCheckpoint::Open(IterationDirectory(dir_, 7));
  ASSERT_TRUE(checkpoint.ok());
  const std::string victim = "model.layers.2.self_attn.kv_b_proj.weight";
  const v1::TensorEntry* entry = checkpoint->Find(victim);
  ASSERT_NE(entry, nullptr);
  std::ifstream in(shard_, std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  FlipByte(shard_, 8 + header_size + entry->offset() + 17);
  absl::Status status = Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), "XXH64")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), victim)) << status;
}

TEST_F(CorruptionTest, MissingManifestOfTheLatest) {
  fs::remove(IterationDirectory(dir_, 7) + "/manifest.json");
  absl::Status status = Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "manifest.json")) << status;
}

TEST_F(CorruptionTest, ManifestOfAnotherIteration) {
  const std::string other = IterationDirectory(dir_, 9);
  fs::create_directories(other);
  for (const auto& file : fs::directory_iterator(IterationDirectory(dir_, 7))) {
    fs::copy(file.path(), other / file.path().filename());
  }
  std::ofstream(dir_ + "/latest_checkpointed_iteration.txt") << "9\n";
  absl::Status status = Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), "iteration 7")) << status;
}

TEST_F(CorruptionTest, ManifestDisagreeingWithShardHeader) {
  const std::string path = IterationDirectory(dir_, 7) + "/manifest.json";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const std::string from = "\"dtype\": \"F32\"";
  text.replace(text.find(from), from.size(), "\"dtype\": \"BF16\"");
  std::ofstream(path) << text;
  absl::Status status = Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(
      absl::StrContains(status.message(), "does not match the manifest"))
      << status;
}

TEST_F(CorruptionTest, WrongShapeAndMissingTensorChangeNothing) {
  RankState target(map_, 0, 1, true);
  Tensor wrong({3, 3});
  target.state().model.back().tensor = &wrong;
  const std::string name = target.state().model.back().name;
  absl::Status status = LoadCheckpoint(dir_, map_, 0, &target.state()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), name)) << status;
  for (const StateTensor& entry : target.state().model) {
    for (float value : entry.tensor->HostValues()) ASSERT_EQ(value, 0.f);
  }

  RankState missing(map_, 0, 1, true);
  Tensor extra({2});
  missing.state().optimizer.push_back({"exp_avg_sq/lm_head.weight", &extra});
  status = LoadCheckpoint(dir_, map_, 0, &missing.state()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "exp_avg_sq/lm_head.weight"));
}

TEST_F(CorruptionTest, CrashMidSaveKeepsThePreviousCheckpoint) {
  // Iteration 8: the shard is written, the process dies before the manifest.
  RankState next(map_, 0, 1, false);
  next.state().iteration = 8;
  ASSERT_TRUE(SaveShard(dir_, map_, 0, next.state()).ok());
  EXPECT_EQ(*ReadLatestIteration(dir_), 7);
  // A torn shard of iteration 8 (a partial temporary file, and the shard cut).
  const std::string shard8 =
      IterationDirectory(dir_, 8) + "/rank_00000.safetensors";
  fs::resize_file(shard8, fs::file_size(shard8) / 2);
  std::ofstream(shard8 + ".tmp") << "partial";
  EXPECT_TRUE(Load().ok());
  RankState loaded(map_, 0, 1, true);
  ASSERT_TRUE(LoadCheckpoint(dir_, map_, 0, &loaded.state()).ok());
  EXPECT_EQ(loaded.state().iteration, 7);
  ExpectSameTensors(saved_, loaded);
  // Finalizing the torn iteration is refused: its shard no longer matches.
  absl::Status finalize =
      FinalizeCheckpoint(dir_,
                         InfoOf(next.state(), map_, PipelineExpertLayout(1, 1)))
          .status();
  EXPECT_EQ(finalize.code(), absl::StatusCode::kDataLoss) << finalize;
  EXPECT_EQ(*ReadLatestIteration(dir_), 7);
}

// Saves iteration 8 in a forked child that `restrict_child` first narrows
// (a file-size limit, fewer privileges) so that the failure stays in the
// child; checks the save failed and returns its error text, which comes back
// through a pipe (a child that gave up its privileges may not write files).
std::string FailedSaveInChild(const std::string& save_dir, const HfNameMap& map,
                              const std::function<void()>& restrict_child) {
  int message_pipe[2];
  EXPECT_EQ(pipe(message_pipe), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(message_pipe[0]);
    restrict_child();
    RankState next(map, 0, 1, false);
    next.state().iteration = 8;
    const absl::Status saved =
        SaveCheckpoint(save_dir, map, PipelineExpertLayout(1, 1), next.state())
            .status();
    const std::string text = saved.ToString();
    const bool sent = write(message_pipe[1], text.data(), text.size()) ==
                      static_cast<ssize_t>(text.size());
    _exit(saved.ok() || !sent ? 0 : 1);
  }
  close(message_pipe[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = read(message_pipe[0], buffer, sizeof buffer)) > 0;) {
    message.append(buffer, n);
  }
  close(message_pipe[0]);
  int wait_status = 0;
  EXPECT_EQ(waitpid(child, &wait_status, 0), child);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 1)
      << "the save must fail (wait status " << wait_status << ")";
  std::cout << "the save failed: " << message << "\n";
  return message;
}

// After a failed save of iteration 8: iteration 7 is still `latest` and loads
// as saved, and once the cause is gone the same iteration saves over what the
// failed save left.
void ExpectPreviousCheckpointThenSaveAgain(const std::string& save_dir,
                                           const HfNameMap& map,
                                           RankState& saved) {
  EXPECT_FALSE(fs::exists(IterationDirectory(save_dir, 8) + "/manifest.json"));
  EXPECT_EQ(*ReadLatestIteration(save_dir), 7);
  RankState loaded(map, 0, 1, true);
  ASSERT_TRUE(LoadCheckpoint(save_dir, map, 0, &loaded.state()).ok());
  EXPECT_EQ(loaded.state().iteration, 7);
  ExpectSameTensors(saved, loaded);
  RankState next(map, 0, 1, false);
  next.state().iteration = 8;
  ASSERT_TRUE(
      SaveCheckpoint(save_dir, map, PipelineExpertLayout(1, 1), next.state())
          .ok());
  EXPECT_EQ(*ReadLatestIteration(save_dir), 8);
}

// A disk that fills mid-save (here a file-size limit: writes past it fail
// with EFBIG, as they fail with ENOSPC on a full disk): the save fails naming
// the file, the previous checkpoint and `latest` stay as they were, and once
// there is room again the same iteration saves.
TEST_F(CorruptionTest, DiskFullDuringSaveKeepsThePreviousCheckpoint) {
  const rlim_t limit = static_cast<rlim_t>(fs::file_size(shard_) / 2);
  const std::string message = FailedSaveInChild(dir_, map_, [limit] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{limit, limit};
    setrlimit(RLIMIT_FSIZE, &small);
  });
  EXPECT_TRUE(absl::StrContains(message, "rank_00000.safetensors")) << message;
  ExpectPreviousCheckpointThenSaveAgain(dir_, map_, saved_);
}

// A save directory the trainer may no longer write (EACCES): the save fails
// naming the directory it could not create and why, and the previous
// checkpoint and `latest` stay as they were. Root ignores directory modes, so
// as root the child becomes "nobody", to whom the save directory is readable
// but not writable. Its working directory is the save directory, entered
// before dropping privileges, because the test's temporary directory may lie
// under one only root can search (/root).
TEST_F(CorruptionTest, PermissionDeniedDuringSaveKeepsThePreviousCheckpoint) {
  constexpr uid_t kNobody = 65534;
  const bool as_root = geteuid() == 0;
  const fs::perms writable_by_the_child =
      as_root ? fs::perms::others_write : fs::perms::owner_write;
  fs::permissions(dir_, fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::add);
  fs::permissions(dir_, writable_by_the_child, fs::perm_options::remove);
  const std::string message = FailedSaveInChild(".", map_, [this, as_root] {
    if (chdir(dir_.c_str()) != 0) _exit(2);
    if (as_root && (setgid(kNobody) != 0 || setuid(kNobody) != 0)) _exit(3);
  });
  fs::permissions(dir_, fs::perms::owner_write, fs::perm_options::add);
  EXPECT_TRUE(absl::StrContains(
      message, "cannot create ./iter_0000008: Permission denied"))
      << message;
  ExpectPreviousCheckpointThenSaveAgain(dir_, map_, saved_);
}

TEST(NativeCheckpointTest, LoraHoldsOnlyAdapters) {
  const std::string dir = NewTempDir();
  Tensor a = GlobalValue("a", {4, 64}), b = GlobalValue("b", {64, 4});
  const std::vector<StateTensor> adapters = {
      {"model.layers.0.self_attn.q_a_proj.lora_A.weight", &a},
      {"model.layers.0.self_attn.q_a_proj.lora_B.weight", &b}};
  absl::StatusOr<v1::CheckpointManifest> manifest =
      SaveLoraCheckpoint(dir, 5, adapters);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->kind(), "lora");
  EXPECT_EQ(manifest->tensors_size(), 2);

  Tensor a2({4, 64}), b2({64, 4});
  ASSERT_TRUE(LoadLoraCheckpoint(
                  dir, {{adapters[0].name, &a2}, {adapters[1].name, &b2}})
                  .ok());
  EXPECT_EQ(a2.values(), a.values());
  EXPECT_EQ(b2.values(), b.values());

  const HfNameMap map =
      TinyNameMap(ExpertForm::kPerExpert, PipelineExpertLayout(1, 1));
  RankState target(map, 0, 1, true);
  absl::Status status = LoadCheckpoint(dir, map, 0, &target.state()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

}  // namespace
}  // namespace glm
