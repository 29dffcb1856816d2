#include "training/trainer.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "kernels/tensor_arena.h"
#include "parallel/gloo_collectives.h"
#include "parallel/pipeline_test_util.h"
#include "training/flops.h"

namespace glm {
namespace {

// Samples cut from a short repeating text: a tiny model learns it quickly.
class RepeatingTextDataset : public TokenSampleDataset {
 public:
  RepeatingTextDataset(int64_t seq_length, int64_t size)
      : seq_length_(seq_length), size_(size) {}
  int64_t size() const override { return size_; }
  int64_t seq_length() const override { return seq_length_; }
  std::vector<int32_t> Sample(int64_t index) const override {
    const std::string text = "the quick brown fox jumps over the lazy dog. ";
    std::vector<int32_t> ids;
    for (int64_t i = 0; i <= seq_length_; ++i) {
      ids.push_back(
          static_cast<unsigned char>(text[(index * 7 + i) % text.size()]));
    }
    return ids;
  }

 private:
  int64_t seq_length_, size_;
};

TrainerOptions TinyOptions(int64_t iters) {
  TrainerOptions o;
  o.model = *PresetConfig("glm5.2-tiny");
  o.train_iters = iters;
  o.global_batch_size = 4;
  o.micro_batch_size = 2;
  o.seq_length = 32;  // longer than index_topk 16: sparse attention
  o.schedule = {3e-3, 3e-4, 2, iters};
  o.router_bias_update_rate = 1e-3;
  o.seed = 42;
  return o;
}

// `memory` (may be null: host) is where the backend's tensors live.
// `data_parallel` (may be null: one rank) is its data-parallel group, and
// `experts` (may be null) its expert-parallel group.
std::unique_ptr<Trainer> MakeTrainer(
    const TrainerOptions& options, Allocator* memory = nullptr,
    Collectives* data_parallel = nullptr, Collectives* experts = nullptr,
    Collectives* tensor = nullptr, std::optional<PipelineRank> pipeline = {}) {
  std::optional<ExpertParallelRank> expert_parallel;
  if (experts != nullptr)
    expert_parallel = ExpertParallelRank{experts, nullptr};
  std::optional<TokenParallelRank> token_parallel;
  if (tensor != nullptr) token_parallel = TokenParallelRank{tensor, nullptr};
  auto trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<RepeatingTextDataset>(options.seq_length, 4096)),
      nullptr, std::make_unique<CpuBackend>(memory), data_parallel,
      std::move(pipeline), expert_parallel, token_parallel);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return std::move(*trainer);
}

std::vector<double> Losses(Trainer* trainer) {
  std::vector<double> losses;
  while (!trainer->Done()) {
    absl::StatusOr<v1::StepMetrics> metrics = trainer->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    losses.push_back(metrics->lm_loss());
  }
  return losses;
}

TEST(TrainerTest, LossFallsOnATinyRun) {
  auto trainer = MakeTrainer(TinyOptions(30));
  const std::vector<double> losses = Losses(trainer.get());
  // Random init predicts ~uniformly over 512 tokens: ln 512 = 6.24.
  EXPECT_NEAR(losses.front(), std::log(512.0), 0.3);
  EXPECT_LT(losses.back(), losses.front() - 2.0);
}

// A backend whose tensors live apart from the host (as a GPU's do) trains
// exactly as the host one: every upload, mirror and copy-back is exact.
TEST(TrainerTest, SeparateBackendMemoryTrainsBitwiseEqual) {
  SeparateMemoryAllocator memory;
  TrainerOptions options = TinyOptions(4);
  options.loss.mtp_loss_scale = 0.3f;
  auto host = MakeTrainer(options);
  auto separate = MakeTrainer(options, &memory);
  const std::vector<double> a = Losses(host.get());
  const std::vector<double> b = Losses(separate.get());
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(host->params().lm_head.value.HostValues(),
            separate->params().lm_head.value.HostValues());
  // The weights and gradients the model computes on live there.
  int64_t weights = 0;
  for (const NamedTensor& t : host->params().Named())
    weights += t.value->numel();
  EXPECT_GE(memory.peak_bytes(), 2 * 4 * weights);
}

// Recomputing each layer in the backward trains the same weights bitwise, with
// a lower activation peak (separate memory, as a device's).
TEST(TrainerTest, RecomputedLayersTrainBitwiseEqualInLessMemory) {
  SeparateMemoryAllocator kept_memory, recomputed_memory;
  TrainerOptions options = TinyOptions(3);
  auto kept = MakeTrainer(options, &kept_memory);
  options.loss.recompute_layers = true;
  auto recomputed = MakeTrainer(options, &recomputed_memory);
  const std::vector<double> a = Losses(kept.get());
  const std::vector<double> b = Losses(recomputed.get());
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  std::vector<NamedTensor> want = kept->params().Named(),
                           got = recomputed->params().Named();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(want[i].value->HostValues() == got[i].value->HostValues())
        << want[i].name;
  }
  EXPECT_LT(recomputed_memory.peak_bytes(), kept_memory.peak_bytes());
}

// A backend that owns its memory, as the CUDA backend owns its pool: when it
// is destroyed, no tensor may still hold memory in it.
class BackendOwningItsMemory : public CpuBackend {
 public:
  explicit BackendOwningItsMemory(
      std::unique_ptr<SeparateMemoryAllocator> memory, bool* checked)
      : CpuBackend(memory.get()),
        memory_(std::move(memory)),
        checked_(checked) {}
  ~BackendOwningItsMemory() override {
    EXPECT_EQ(memory_->bytes_in_use(), 0)
        << "tensors outlive the backend that allocated them";
    *checked_ = true;
  }

 private:
  std::unique_ptr<SeparateMemoryAllocator> memory_;
  bool* checked_;
};

TEST(TrainerTest, EveryTensorIsFreedBeforeItsBackend) {
  bool checked = false;
  {
    const TrainerOptions options = TinyOptions(2);
    auto trainer = Trainer::Create(
        options,
        std::make_unique<PretrainData>(
            std::make_unique<RepeatingTextDataset>(options.seq_length, 64)),
        nullptr,
        std::make_unique<BackendOwningItsMemory>(
            std::make_unique<SeparateMemoryAllocator>(), &checked));
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_EQ(Losses(trainer->get()).size(), 2u);
  }
  EXPECT_TRUE(checked);
}

// Copies what one trainer's checkpoint holds into another, as a save and a
// load would.
void TransferState(Trainer* from, Trainer* to) {
  ASSERT_TRUE(from->GatherCheckpointState().ok());
  const TrainingState saved = from->State();
  TrainingState loaded = to->State();
  ASSERT_EQ(saved.model.size(), loaded.model.size());
  ASSERT_EQ(saved.optimizer.size(), loaded.optimizer.size());
  for (size_t i = 0; i < saved.model.size(); ++i) {
    loaded.model[i].tensor->CopyFrom(*saved.model[i].tensor);
  }
  for (size_t i = 0; i < saved.optimizer.size(); ++i) {
    loaded.optimizer[i].tensor->CopyFrom(*saved.optimizer[i].tensor);
  }
  TrainingState scalars = saved;
  scalars.model = loaded.model;
  scalars.optimizer = loaded.optimizer;
  ASSERT_TRUE(to->Restore(scalars).ok());
}

// One trainer trains four steps (run 0); another two (run 1), whose
// checkpoint a third (run 2) loads before training the last two: its losses
// and weights are the uninterrupted run's bit for bit.
void ExpectResumedRunContinues(
    const std::function<std::unique_ptr<Trainer>(int run)>& make) {
  auto whole = make(0);
  const std::vector<double> expected = Losses(whole.get());
  auto first = make(1);
  ASSERT_TRUE(first->Step().ok());
  ASSERT_TRUE(first->Step().ok());
  auto resumed = make(2);
  TransferState(first.get(), resumed.get());
  first->ReleaseCheckpointState();
  resumed->ReleaseCheckpointState();
  ASSERT_EQ(resumed->iteration(), 2);
  const std::vector<double> rest = Losses(resumed.get());
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], expected[2]);
  EXPECT_EQ(rest[1], expected[3]);
  EXPECT_EQ(resumed->params().lm_head.value.HostValues(),
            whole->params().lm_head.value.HostValues());
}

// Weights and moments that stay in the backend's memory go to the host for a
// checkpoint and come back from it exactly.
TEST(TrainerTest, SeparateBackendMemoryResumesBitwiseEqual) {
  SeparateMemoryAllocator memory;
  ExpectResumedRunContinues(
      [&](int) { return MakeTrainer(TinyOptions(4), &memory); });
}

// LoRA training on the device: a checkpoint brings the adapters and their
// moments to the host and a load takes them back (the frozen weights stay
// where they are), so the resumed run continues bit for bit.
TEST(TrainerTest, LoraOnTheDeviceResumesBitwiseEqual) {
  SeparateMemoryAllocator memory;
  TrainerOptions options = TinyOptions(4);
  options.lora = LoraOptions{4, 8, {"q_a_proj", "o_proj", "gate_proj"}};
  ExpectResumedRunContinues([&](int) {
    auto trainer = MakeTrainer(options, &memory);
    EXPECT_TRUE(trainer->trains_on_device());
    return trainer;
  });
}

// Two ranks on threads, each training in memory of its own (standing in for
// a GPU's): `make(rank, memory, groups)` makes a trainer of rank `rank` from
// one run's Gloo groups (one per name in `group_names`, joined by both
// ranks), and the resumed run continues the uninterrupted one
// (ExpectResumedRunContinues).
using RankTrainerMaker = std::function<std::unique_ptr<Trainer>(
    int rank, Allocator* memory, const std::vector<Collectives*>& groups)>;
void ExpectTwoDeviceRanksResume(const std::vector<std::string>& group_names,
                                const RankTrainerMaker& make) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<std::unique_ptr<GlooCollectives>> owned;
      std::vector<std::vector<Collectives*>> runs(3);
      for (int run = 0; run < 3; ++run) {
        for (const std::string& name : group_names) {
          auto group = GlooCollectives::Connect(
              store, absl::StrCat("run", run, "-", name), rank, 2, {});
          ASSERT_TRUE(group.ok()) << group.status();
          owned.push_back(*std::move(group));
          runs[run].push_back(owned.back().get());
        }
      }
      SeparateMemoryAllocator memory;
      ExpectResumedRunContinues(
          [&](int run) { return make(rank, &memory, runs[run]); });
      for (const auto& group : owned) EXPECT_TRUE(group->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

// Two ranks on the device, each keeping its part of the AdamW moments in the
// backend's memory (ZeRO-1: its shard; EP2: the dense tensors' and its own
// experts'; both: its shard of the dense tensors and its experts'): a
// checkpoint brings every part to the host and a load deals them back, so
// the resumed ranks continue the uninterrupted run bit for bit.
void ExpectTwoRanksResumeBitwiseEqual(bool distributed_optimizer,
                                      bool expert_parallel) {
  ExpectTwoDeviceRanksResume(
      {"dp", "ep"},
      [&](int, Allocator* memory, const std::vector<Collectives*>& groups) {
        TrainerOptions options = TinyOptions(4);
        options.distributed_optimizer = distributed_optimizer;
        return MakeTrainer(options, memory, groups[0],
                           expert_parallel ? groups[1] : nullptr);
      });
}

TEST(TrainerTest, DistributedOptimizerOnTheDeviceResumesBitwiseEqual) {
  ExpectTwoRanksResumeBitwiseEqual(/*distributed_optimizer=*/true,
                                   /*expert_parallel=*/false);
}

TEST(TrainerTest, ExpertParallelOnTheDeviceResumesBitwiseEqual) {
  ExpectTwoRanksResumeBitwiseEqual(/*distributed_optimizer=*/false,
                                   /*expert_parallel=*/true);
  ExpectTwoRanksResumeBitwiseEqual(/*distributed_optimizer=*/true,
                                   /*expert_parallel=*/true);
}

// Two tensor-parallel ranks training on the device: a checkpoint joins both
// ranks' parts of the split weights and moments into whole tensors on the
// host, and a load deals each rank its part back to the device, so the
// resumed ranks continue the uninterrupted run bit for bit.
TEST(TrainerTest, TensorParallelOnTheDeviceResumesBitwiseEqual) {
  ExpectTwoDeviceRanksResume(
      {"tp"},
      [](int, Allocator* memory, const std::vector<Collectives*>& groups) {
        return MakeTrainer(TinyOptions(4), memory, nullptr, nullptr, groups[0]);
      });
}

// Two pipeline ranks training on the device (each its stages' weights and
// moments): a checkpoint brings them to the host and a load takes them back,
// so the resumed ranks continue the uninterrupted run bit for bit.
TEST(TrainerTest, PipelineOnTheDeviceResumesBitwiseEqual) {
  const absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(*PresetConfig("glm5.2-tiny"), "Etttttt|ttmL", 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectTwoDeviceRanksResume(
      {"pp", "ppb"}, [&](int rank, Allocator* memory,
                         const std::vector<Collectives*>& groups) {
        PipelineRank pipeline{
            groups[0], RingLinks(*groups[0], *groups[1]), {}, *plan};
        for (const StageSlice& stage : *plan) {
          if (stage.pp_rank == rank) pipeline.stages.push_back(stage);
        }
        return MakeTrainer(TinyOptions(4), memory, nullptr, nullptr, nullptr,
                           pipeline);
      });
}

// Counts the compute-copy refreshes a trainer asks its backend for.
class CountingRefreshes : public CpuBackend {
 public:
  CountingRefreshes(Allocator* memory, int* refreshes)
      : CpuBackend(memory), refreshes_(refreshes) {}
  void RefreshComputeCopies(const std::vector<ConstFloatSpan>&) override {
    ++*refreshes_;
  }

 private:
  int* refreshes_;
};

std::unique_ptr<Trainer> MakeCountingTrainer(const TrainerOptions& options,
                                             Allocator* memory,
                                             int* refreshes) {
  auto trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<RepeatingTextDataset>(options.seq_length, 4096)),
      nullptr, std::make_unique<CountingRefreshes>(memory, refreshes));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return std::move(*trainer);
}

// Weights that train in the backend's memory get their compute copies
// refreshed before the first step and after a load only: the backend's AdamW
// steps write the copies of what they update. Weights written otherwise
// (LoRA merges its adapters into them) need a refresh every step.
TEST(TrainerTest, ComputeCopiesAreRefreshedWhenNoDeviceStepWroteThem) {
  SeparateMemoryAllocator memory;
  int refreshes = 0, resumed_refreshes = 0, lora_refreshes = 0;
  auto trainer = MakeCountingTrainer(TinyOptions(4), &memory, &refreshes);
  ASSERT_TRUE(trainer->Step().ok());
  ASSERT_TRUE(trainer->Step().ok());
  EXPECT_EQ(refreshes, 1);
  auto resumed =
      MakeCountingTrainer(TinyOptions(4), &memory, &resumed_refreshes);
  TransferState(trainer.get(), resumed.get());
  EXPECT_EQ(Losses(resumed.get()).size(), 2u);
  EXPECT_EQ(resumed_refreshes, 1);

  TrainerOptions lora = TinyOptions(2);
  lora.lora = LoraOptions{4, 8, {"q_a_proj", "o_proj"}};
  auto adapters = MakeCountingTrainer(lora, &memory, &lora_refreshes);
  EXPECT_EQ(Losses(adapters.get()).size(), 2u);
  EXPECT_EQ(lora_refreshes, 2);
}

// The device optimizer's moments are two flat buffers: a load makes them as
// the first step does.
TEST(TrainerTest, DeviceMomentsLiveInTwoAllocations) {
  SeparateMemoryAllocator memory, resumed_memory;
  auto trainer = MakeTrainer(TinyOptions(4), &memory);
  const int64_t built = memory.allocations();
  ASSERT_TRUE(trainer->Step().ok());
  auto resumed = MakeTrainer(TinyOptions(4), &resumed_memory);
  const int64_t resumed_built = resumed_memory.allocations();
  const int64_t resumed_bytes = resumed_memory.bytes_in_use();
  TransferState(trainer.get(), resumed.get());
  int64_t moment_bytes = 0;
  for (const NamedTensor& t : resumed->params().Named()) {
    if (t.grad != nullptr) moment_bytes += 2 * ArenaBytes(t.value->numel());
  }
  EXPECT_EQ(resumed_memory.allocations(), resumed_built + 2);
  EXPECT_EQ(resumed_memory.bytes_in_use(), resumed_bytes + moment_bytes);
  // A step then adds what the first step added beside the moments.
  ASSERT_TRUE(resumed->Step().ok());
  EXPECT_EQ(resumed_memory.allocations() - resumed_built,
            memory.allocations() - built);
}

TEST(TrainerTest, DeterministicRerunIsBitwiseEqual) {
  auto first = MakeTrainer(TinyOptions(4));
  auto second = MakeTrainer(TinyOptions(4));
  const std::vector<double> a = Losses(first.get());
  const std::vector<double> b = Losses(second.get());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  EXPECT_EQ(first->params().lm_head.value.HostValues(),
            second->params().lm_head.value.HostValues());
}

TEST(TrainerTest, NonFiniteGradientsSkipTheIterationAndCountIt) {
  auto trainer = MakeTrainer(TinyOptions(3));
  trainer->params().norm.value.data()[0] =
      std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before =
      trainer->params().lm_head.value.HostValues();
  absl::StatusOr<v1::StepMetrics> metrics = trainer->Step();
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->skipped_iterations(), 1);
  EXPECT_EQ(metrics->nan_iterations(), 1);
  EXPECT_EQ(metrics->iteration(), 1);
  EXPECT_EQ(metrics->consumed_samples(), 4);
  // A skipped iteration leaves the weights alone.
  EXPECT_EQ(trainer->params().lm_head.value.HostValues(), before);
}

TEST(TrainerTest, MetricsCarryScheduleAndThroughput) {
  auto trainer = MakeTrainer(TinyOptions(3));
  absl::StatusOr<v1::StepMetrics> metrics = trainer->Step();
  ASSERT_TRUE(metrics.ok());
  EXPECT_DOUBLE_EQ(metrics->learning_rate(), 1.5e-3);  // warmup 1 of 2
  // Throughput from the step time: 4 sequences of 32 tokens.
  const double seconds = metrics->step_time_ms() / 1e3;
  EXPECT_NEAR(metrics->tokens_per_sec_per_device(), 4 * 32 / seconds,
              1e-9 * metrics->tokens_per_sec_per_device());
  const TrainerOptions options = TinyOptions(3);
  EXPECT_NEAR(metrics->tflops_per_device(),
              TrainingFlops(options.model, 32, 4) / seconds / 1e12,
              1e-9 * metrics->tflops_per_device());
  // The norm of the step's gradients (the params' summed gradients over its
  // two micro batches, as they stand after the step), before clipping.
  double squares = 0;
  for (const NamedTensor& t : trainer->params().Named()) {
    if (t.grad == nullptr) continue;
    for (float g : t.grad->HostValues()) squares += double{g} * g;
  }
  EXPECT_NEAR(metrics->grad_norm(), std::sqrt(squares) / 2,
              1e-9 * metrics->grad_norm());
  // The process holds at least the weights, gradients and two moments.
  int64_t weights = 0;
  for (const NamedTensor& t : trainer->params().Named()) {
    weights += t.value->numel();
  }
  EXPECT_GE(metrics->peak_memory_bytes(), 4 * 4 * weights);
  // 7 MoE layers in the main model (first_k_dense_replace = 1), then MTP's.
  EXPECT_EQ(metrics->expert_load_imbalance_size(), 8);
  for (double imbalance : metrics->expert_load_imbalance()) {
    EXPECT_GE(imbalance, 1.0);
  }
}

TEST(TrainerTest, RejectsADatasetTooSmallForTheRun) {
  TrainerOptions options = TinyOptions(100);
  auto trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<RepeatingTextDataset>(options.seq_length, 10)),
      nullptr, std::make_unique<CpuBackend>());
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("samples"), std::string::npos);
}

}  // namespace
}  // namespace glm
