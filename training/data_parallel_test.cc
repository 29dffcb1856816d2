// Data parallelism over two ranks (threads, each with its own Gloo context)
// takes the same steps as one process: same losses, same gradient norm, same
// updated weights and optimizer moments, with or without the distributed
// optimizer (ZeRO-1); and with expert parallelism folded over the same two
// ranks (EP2: each rank holds half of the routed experts), with or without
// ZeRO-1.
#include <cmath>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "kernels/tensor_arena.h"
#include "parallel/gloo_collectives.h"
#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_test_util.h"
#include "parallel/place_checking_group.h"
#include "training/distributed_optimizer.h"
#include "training/hashed_token_dataset.h"
#include "training/trainer.h"
#include "training/training_data.h"

namespace glm {
namespace {

TrainerOptions Options() {
  TrainerOptions o;
  o.model = *PresetConfig("glm5.2-tiny");
  o.train_iters = 3;
  o.global_batch_size = 4;
  o.micro_batch_size = 1;
  o.seq_length = 24;
  o.schedule = {3e-3, 3e-4, 1, 3};
  o.router_bias_update_rate = 1e-2;
  o.seed = 7;
  return o;
}

struct TrainingRun {
  std::vector<v1::StepMetrics> steps;
  // Model tensors, then AdamW moments (gathered from every rank's shard
  // with the distributed optimizer), by name.
  std::map<std::string, std::vector<float>> state;
  // With overlap_grad_reduce: the buckets, and those the last step's
  // backward started.
  size_t buckets = 0, started_during_backward = 0;
  // Expert rows exchanged queued on the (stand-in) device.
  int queued_exchanges = 0;
  // Whether the weights and AdamW lived in the backend's memory.
  bool trained_on_device = false;
  // With LoRA: the weights with the adapters merged, as an export takes them.
  std::map<std::string, std::vector<float>> merged;
};

// `memory` (null: host) is where the backend's tensors live.
TrainingRun Train(Collectives* data_parallel, bool distributed_optimizer,
                  std::optional<ExpertParallelRank> expert_parallel = {},
                  std::optional<TokenParallelRank> token_parallel = {},
                  const TrainerOptions& base = Options(),
                  Allocator* memory = nullptr,
                  std::optional<PipelineRank> pipeline = {}) {
  TrainerOptions options = base;
  options.distributed_optimizer = distributed_optimizer;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<HashedTokenDataset>(options.seq_length)),
      nullptr, std::make_unique<CpuBackend>(memory), data_parallel,
      std::move(pipeline), expert_parallel, token_parallel);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  TrainingRun run;
  if (!trainer.ok()) return run;
  run.trained_on_device = (*trainer)->trains_on_device();
  while (!(*trainer)->Done()) {
    absl::StatusOr<v1::StepMetrics> metrics = (*trainer)->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    if (!metrics.ok()) return run;
    run.steps.push_back(*metrics);
  }
  if (const OverlappedGradientSum* sum = (*trainer)->overlapped_sum()) {
    run.buckets = sum->buckets().size();
    run.started_during_backward = sum->started_during_last_backward();
  }
  EXPECT_TRUE((*trainer)->GatherCheckpointState().ok());
  const TrainingState state = (*trainer)->State();
  for (const auto* tensors : {&state.model, &state.optimizer}) {
    for (const StateTensor& t : *tensors) {
      run.state[t.name] = t.tensor->HostValues();
    }
  }
  (*trainer)->ReleaseCheckpointState();
  if (options.lora) {
    absl::StatusOr<TrainingState> merged = (*trainer)->MergedModelState();
    EXPECT_TRUE(merged.ok()) << merged.status();
    if (!merged.ok()) return run;
    for (const StateTensor& t : merged->model) {
      run.merged[t.name] = t.tensor->HostValues();
    }
  }
  return run;
}

// Two data-parallel ranks on threads, each with its own Gloo context; with
// `expert_parallel` the same two ranks also split the routed experts (EP2,
// expert-data-parallel size 1).
// With dp_place kDevice the data-parallel group takes device buffers only
// (parallel/place_checking_group.h: NCCL's place, checked on each buffer).
std::vector<TrainingRun> TrainOnTwoRanks(
    bool distributed_optimizer, bool expert_parallel = false,
    const TrainerOptions& base = Options(), Allocator* memory = nullptr,
    BufferPlace dp_place = BufferPlace::kHost) {
  gloo::rendezvous::HashStore store;
  std::vector<TrainingRun> ranks(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCollectives>> gloo =
          GlooCollectives::Connect(store, "dp", rank, 2, GlooOptions());
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      PlaceCheckingGroup group(*std::move(gloo), dp_place, memory);
      if (!expert_parallel) {
        ranks[rank] =
            Train(&group, distributed_optimizer, {}, {}, base, memory);
        return;
      }
      auto experts = GlooCollectives::Connect(store, "ep", rank, 2, {});
      auto expert_data = GlooCollectives::Connect(
          store, "edp" + std::to_string(rank), 0, 1, {});
      ASSERT_TRUE(experts.ok() && expert_data.ok());
      // The expert group in the data-parallel group's place: its routed rows
      // go where they lie.
      PlaceCheckingGroup expert_group(*std::move(experts), dp_place, memory);
      ranks[rank] = Train(&group, distributed_optimizer,
                          ExpertParallelRank{&expert_group, expert_data->get()},
                          {}, base, memory);
      ranks[rank].queued_exchanges = expert_group.queued();
    });
  }
  for (std::thread& t : threads) t.join();
  return ranks;
}

void ExpectRelativelyNear(double a, double b, const std::string& what) {
  EXPECT_LE(std::abs(a - b), 1e-5 * std::max(std::abs(a), std::abs(b)))
      << what << ": " << a << " vs " << b;
}

void ExpectSameSteps(const TrainingRun& got, const TrainingRun& expected) {
  ASSERT_EQ(got.steps.size(), expected.steps.size());
  for (size_t i = 0; i < expected.steps.size(); ++i) {
    const v1::StepMetrics& a = got.steps[i];
    const v1::StepMetrics& b = expected.steps[i];
    const std::string step = "step " + std::to_string(i + 1);
    ExpectRelativelyNear(a.lm_loss(), b.lm_loss(), step + " lm_loss");
    ExpectRelativelyNear(a.mtp_loss(), b.mtp_loss(), step + " mtp_loss");
    ExpectRelativelyNear(a.indexer_loss(), b.indexer_loss(),
                         step + " indexer_loss");
    ExpectRelativelyNear(a.grad_norm(), b.grad_norm(), step + " grad_norm");
    EXPECT_EQ(a.consumed_samples(), b.consumed_samples());
  }
}

// Within 1e-5 in relative L2 error for weights; 2e-5 for the first moments
// and 4e-5 for the second (squares of gradients double their relative
// error): a moment is the gradients themselves, summed over the ranks in
// another order, whose rounding on AVX-512 BLAS kernels reaches 1.4e-5 (the
// weights, moved by lr times those, stay within 1e-5). (Element-wise, a weight
// whose gradient is near zero can differ more: AdamW's first steps move it by
// about lr * g / (|g| + eps), which magnifies float rounding in the order the
// ranks' gradients are summed.)
void ExpectNear(const float* have, const float* want, size_t count,
                const std::string& name) {
  double norm = 0, error = 0;
  for (size_t i = 0; i < count; ++i) {
    const double diff = double{have[i]} - want[i];
    norm += double{want[i]} * want[i];
    error += diff * diff;
  }
  const double limit = absl::StartsWith(name, "exp_avg_sq/") ? 4e-5
                       : absl::StartsWith(name, "exp_avg/")  ? 2e-5
                                                             : 1e-5;
  EXPECT_LE(std::sqrt(error), limit * std::sqrt(norm)) << name;
}

void ExpectSameState(const TrainingRun& got, const TrainingRun& expected) {
  ASSERT_EQ(got.state.size(), expected.state.size());
  for (const auto& [name, want] : expected.state) {
    const std::vector<float>& have = got.state.at(name);
    ASSERT_EQ(have.size(), want.size()) << name;
    ExpectNear(have.data(), want.data(), want.size(), name);
  }
}

// Expert parallelism: every tensor but the routed experts as ExpectSameState;
// the routed experts (and their moments) of rank `rank` of `ep` are its
// experts' rows of one process's.
void ExpectSameStateOfEpRank(const TrainingRun& got,
                             const TrainingRun& expected, int rank, int ep) {
  ASSERT_EQ(got.state.size(), expected.state.size());
  for (const auto& [name, want] : expected.state) {
    const std::vector<float>& have = got.state.at(name);
    const bool routed = absl::EndsWith(name, "mlp.experts.gate_up_proj") ||
                        absl::EndsWith(name, "mlp.experts.down_proj");
    ASSERT_EQ(have.size() * (routed ? ep : 1), want.size()) << name;
    ExpectNear(have.data(), want.data() + (routed ? rank * have.size() : 0),
               have.size(), name);
  }
}

TEST(DataParallelTest, TwoRanksTakeTheStepsOfOneProcess) {
  const TrainingRun single = Train(nullptr, false);
  ASSERT_EQ(single.steps.size(), 3u);
  const std::vector<TrainingRun> ranks = TrainOnTwoRanks(false);
  for (const TrainingRun& rank : ranks) {
    ExpectSameSteps(rank, single);
    ExpectSameState(rank, single);
  }
  EXPECT_EQ(ranks[0].state, ranks[1].state);
}

void ExpectBitwiseSameRuns(const std::vector<TrainingRun>& got,
                           const std::vector<TrainingRun>& host) {
  ASSERT_EQ(got.size(), host.size());
  for (size_t rank = 0; rank < host.size(); ++rank) {
    ASSERT_EQ(got[rank].steps.size(), host[rank].steps.size());
    for (size_t i = 0; i < host[rank].steps.size(); ++i) {
      EXPECT_EQ(got[rank].steps[i].lm_loss(), host[rank].steps[i].lm_loss());
      EXPECT_EQ(got[rank].steps[i].grad_norm(),
                host[rank].steps[i].grad_norm());
    }
    EXPECT_EQ(got[rank].state, host[rank].state);
  }
}

// Each rank's weights and AdamW lived in the backend's memory.
void ExpectTrainedOnTheDevice(const std::vector<TrainingRun>& runs) {
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    EXPECT_TRUE(runs[rank].trained_on_device) << "rank " << rank;
  }
}

// Two ranks whose backend memory stands apart from the host, as two workers
// sharing one GPU, and every step equals the host run's bit for bit (DP2 with
// and without ZeRO-1, EP2): the weights and the optimizer (ZeRO-1: the rank's
// shard of it) stay on the device and the device's gradients, updated shards
// and routed rows travel through host copies for the host groups. With a
// data-parallel group that takes device buffers (NCCL's place) the resident
// gradients go to it where they lie and the host's buffers (losses, ZeRO-1's
// shards) through device copies, and an expert group in that place takes the
// routed rows where they lie, queued on the device: the same steps again.
TEST(DataParallelTest, SeparateBackendMemoryTakesTheHostSteps) {
  SeparateMemoryAllocator memory;
  for (const auto& [distributed_optimizer, expert_parallel] :
       {std::pair{false, false}, std::pair{true, false},
        std::pair{false, true}}) {
    SCOPED_TRACE(testing::Message()
                 << "distributed optimizer " << distributed_optimizer
                 << ", expert parallel " << expert_parallel);
    const std::vector<TrainingRun> host =
        TrainOnTwoRanks(distributed_optimizer, expert_parallel);
    ExpectBitwiseSameRuns(TrainOnTwoRanks(distributed_optimizer,
                                          expert_parallel, Options(), &memory),
                          host);
    const std::vector<TrainingRun> device_groups =
        TrainOnTwoRanks(distributed_optimizer, expert_parallel, Options(),
                        &memory, BufferPlace::kDevice);
    ExpectBitwiseSameRuns(device_groups, host);
    // The routed rows and their counts went to the device group queued (as
    // on NCCL: no host wait), five exchanges a MoE layer a micro batch.
    for (const TrainingRun& rank : device_groups) {
      if (expert_parallel) {
        EXPECT_GT(rank.queued_exchanges, 0);
        EXPECT_EQ(rank.queued_exchanges % 5, 0);
      } else {
        EXPECT_EQ(rank.queued_exchanges, 0);
      }
    }
  }
}

// tp x cp ranks (tensor rank fastest) on threads, each with Gloo groups of
// its own in `place` (parallel/place_checking_group.h), its backend's tensors
// in memory of its own (standing in for a GPU's) or the host's.
std::vector<TrainingRun> TrainTokenParallel(int tp, int cp,
                                            bool separate_memory,
                                            BufferPlace place) {
  gloo::rendezvous::HashStore store;
  std::vector<TrainingRun> ranks(tp * cp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp * cp; ++rank) {
    threads.emplace_back([&, rank] {
      SeparateMemoryAllocator memory;
      Allocator* device = separate_memory ? &memory : nullptr;
      auto join = [&](const std::string& key, int member, int size) {
        std::unique_ptr<PlaceCheckingGroup> group;
        if (size == 1) return group;
        auto gloo = GlooCollectives::Connect(store, key, member, size, {});
        EXPECT_TRUE(gloo.ok()) << gloo.status();
        if (gloo.ok()) {
          group = std::make_unique<PlaceCheckingGroup>(*std::move(gloo), place,
                                                       device);
        }
        return group;
      };
      const int tp_rank = rank % tp, cp_rank = rank / tp;
      auto dp = GlooCollectives::Connect(store, "dp" + std::to_string(rank), 0,
                                         1, {});
      ASSERT_TRUE(dp.ok()) << dp.status();
      const std::unique_ptr<PlaceCheckingGroup> tensor =
          join("tp" + std::to_string(cp_rank), tp_rank, tp);
      const std::unique_ptr<PlaceCheckingGroup> context =
          join("cp" + std::to_string(tp_rank), cp_rank, cp);
      ranks[rank] = Train(dp->get(), false, {},
                          TokenParallelRank{tensor.get(), context.get()},
                          Options(), device);
      for (PlaceCheckingGroup* group : {tensor.get(), context.get()}) {
        if (group != nullptr) {
          EXPECT_TRUE(group->Barrier().ok());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return ranks;
}

// Tensor- and context-parallel ranks whose backend memory stands apart from
// the host (as on a GPU) keep their weights and AdamW there and sum their
// gradients where they lie;
// with groups that take the host's buffers (Gloo, through host copies) or
// the device's (NCCL's place), every step and tensor equals the host run's
// bit for bit.
TEST(DataParallelTest, TokenParallelRanksTrainInTheBackendMemory) {
  for (const auto& [tp, cp] :
       {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    SCOPED_TRACE(testing::Message() << "tp " << tp << ", cp " << cp);
    const std::vector<TrainingRun> host =
        TrainTokenParallel(tp, cp, false, BufferPlace::kHost);
    ASSERT_EQ(host.size(), static_cast<size_t>(tp * cp));
    ASSERT_FALSE(host[0].steps.empty());
    for (BufferPlace place : {BufferPlace::kHost, BufferPlace::kDevice}) {
      const std::vector<TrainingRun> device =
          TrainTokenParallel(tp, cp, true, place);
      ExpectBitwiseSameRuns(device, host);
      ExpectTrainedOnTheDevice(device);
    }
  }
}

// Two pp ranks of `layout` on threads, each with its own Gloo groups, its
// backend's tensors in memory of its own (standing in for a GPU's) or the
// host's.
std::vector<TrainingRun> TrainPipeline(const std::string& layout,
                                       bool separate_memory) {
  const absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(*PresetConfig("glm5.2-tiny"), layout, 2);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  gloo::rendezvous::HashStore store;
  std::vector<TrainingRun> ranks(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = GlooCollectives::Connect(store, "pp", rank, 2, {});
      auto edges = ConnectGlooEdges(store, rank, 2);
      ASSERT_TRUE(group.ok() && edges.ok());
      PipelineRank pipeline{group->get(), (*edges)->Links(), {}, *plan};
      for (const StageSlice& stage : *plan) {
        if (stage.pp_rank == rank) pipeline.stages.push_back(stage);
      }
      SeparateMemoryAllocator memory;
      ranks[rank] = Train(nullptr, false, {}, {}, Options(),
                          separate_memory ? &memory : nullptr, pipeline);
      // Each rank's edges stay until its peer is done with them.
      EXPECT_TRUE((*group)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  return ranks;
}

// Pipeline ranks whose backend memory stands apart from the host keep their
// stages' weights and AdamW there and sum the shared tensors' gradients
// there: every step and
// tensor equals the host run's bit for bit, with one stage a rank and with
// two (interleaved).
TEST(DataParallelTest, PipelineRanksTrainInTheBackendMemory) {
  for (const char* layout : {"Etttttt|ttmL", "Et|t|tttt|ttmL"}) {
    SCOPED_TRACE(layout);
    const std::vector<TrainingRun> host = TrainPipeline(layout, false);
    const std::vector<TrainingRun> device = TrainPipeline(layout, true);
    ASSERT_EQ(host.size(), 2u);
    ASSERT_FALSE(host[1].steps.empty());
    ExpectBitwiseSameRuns(device, host);
    ExpectTrainedOnTheDevice(device);
  }
}

// Gradients summed in buckets during the last backward (overlap_grad_reduce;
// small buckets, so that each layer's gradients span several) take the
// steps of one sum after the backward bit for bit, with and without ZeRO-1:
// host ranks, and ranks on separate backend memory with a host group (each
// bucket through host copies) and with a device-place group (summed where
// they lie).
TEST(DataParallelTest, OverlappedGradientSumsTakeTheSameSteps) {
  TrainerOptions overlapped = Options();
  overlapped.overlap_grad_reduce = true;
  overlapped.gradient_bucket_elements = 20'000;
  SeparateMemoryAllocator memory;
  for (bool distributed_optimizer : {false, true}) {
    SCOPED_TRACE(testing::Message()
                 << "distributed optimizer " << distributed_optimizer);
    const std::vector<TrainingRun> host =
        TrainOnTwoRanks(distributed_optimizer);
    for (const auto& [place, dp_place] :
         {std::pair<Allocator*, BufferPlace>{nullptr, BufferPlace::kHost},
          {&memory, BufferPlace::kHost},
          {&memory, BufferPlace::kDevice}}) {
      const std::vector<TrainingRun> runs = TrainOnTwoRanks(
          distributed_optimizer, false, overlapped, place, dp_place);
      ExpectBitwiseSameRuns(runs, host);
      // Every bucket started while the backward ran.
      for (const TrainingRun& rank : runs) {
        EXPECT_GT(rank.buckets, 10u);
        EXPECT_EQ(rank.started_during_backward, rank.buckets);
      }
    }
  }
}

TEST(DataParallelTest, OverlappedGradientSumsNeedDataParallelismAlone) {
  TrainerOptions options = Options();
  options.overlap_grad_reduce = true;
  options.lora = LoraOptions{4, 8, {"q_a_proj"}};
  absl::Status status =
      Trainer::Create(
          options,
          std::make_unique<PretrainData>(
              std::make_unique<HashedTokenDataset>(options.seq_length)),
          nullptr, std::make_unique<CpuBackend>())
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("training.overlap_grad_reduce"),
            std::string::npos)
      << status;
}

// On a device the weights stay there with the AdamW moments of what the rank
// updates: under ZeRO-1 its shard (a step adds about half the moments a
// plain data-parallel rank's adds), under EP2 the dense tensors and its own
// half of the routed experts (more than a quarter, less than all); host-side
// moments would add none.
TEST(DataParallelTest, OptimizerStateStaysOnTheDevice) {
  auto device_growth = [](bool distributed_optimizer, bool expert_parallel) {
    gloo::rendezvous::HashStore store;
    std::vector<int64_t> growth(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        auto group = GlooCollectives::Connect(store, "dp", rank, 2, {});
        auto experts = GlooCollectives::Connect(store, "ep", rank, 2, {});
        ASSERT_TRUE(group.ok() && experts.ok());
        SeparateMemoryAllocator memory;
        TrainerOptions options = Options();
        options.distributed_optimizer = distributed_optimizer;
        std::optional<ExpertParallelRank> expert_parallel_rank;
        if (expert_parallel) {
          expert_parallel_rank = ExpertParallelRank{experts->get(), nullptr};
        }
        auto trainer = Trainer::Create(
            options,
            std::make_unique<PretrainData>(
                std::make_unique<HashedTokenDataset>(options.seq_length)),
            nullptr, std::make_unique<CpuBackend>(&memory), group->get(),
            std::nullopt, expert_parallel_rank);
        ASSERT_TRUE(trainer.ok()) << trainer.status();
        const int64_t before = memory.bytes_in_use();
        ASSERT_TRUE((*trainer)->Step().ok());
        growth[rank] = memory.bytes_in_use() - before;
      });
    }
    for (std::thread& t : threads) t.join();
    return growth;
  };
  const std::vector<int64_t> plain = device_growth(false, false);
  const std::vector<int64_t> sharded = device_growth(true, false);
  const std::vector<int64_t> experts = device_growth(false, true);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(sharded[rank], plain[rank] / 4) << "rank " << rank;
    EXPECT_LT(sharded[rank], plain[rank] * 3 / 4) << "rank " << rank;
    EXPECT_GT(experts[rank], plain[rank] / 4) << "rank " << rank;
    EXPECT_LT(experts[rank], plain[rank]) << "rank " << rank;
  }
}

TEST(DataParallelTest, DistributedOptimizerTakesThePlainSteps) {
  const TrainingRun single = Train(nullptr, false);
  const std::vector<TrainingRun> ranks = TrainOnTwoRanks(true);
  for (const TrainingRun& rank : ranks) {
    ExpectSameSteps(rank, single);
    ExpectSameState(rank, single);
  }
  // Parameters and the gathered moments agree bitwise across the ranks.
  EXPECT_EQ(ranks[0].state, ranks[1].state);
}

// EP2 with and without ZeRO-1 (then the dense tensors are sharded over the
// data-parallel group and each rank updates its own experts: no expert-data
// replicas).
TEST(DataParallelTest, ExpertParallelTwoRanksTakeTheStepsOfOneProcess) {
  const TrainingRun single = Train(nullptr, false);
  for (bool distributed_optimizer : {false, true}) {
    const std::vector<TrainingRun> ranks =
        TrainOnTwoRanks(distributed_optimizer, /*expert_parallel=*/true);
    for (int rank = 0; rank < 2; ++rank) {
      ExpectSameSteps(ranks[rank], single);
      ExpectSameStateOfEpRank(ranks[rank], single, rank, 2);
    }
  }
}

// LoRA under context parallelism: two ranks split each micro batch's tokens
// (the adapters' gradients are linear in the weights', so the context group
// sums them like any gradient). AdamW eps 1e-3, as in worker's
// parallel_e2e_test: the split changes every GEMM's rounding, which the
// default eps would magnify on near-zero gradients.
TEST(DataParallelTest, LoraUnderContextParallelTakesTheStepsOfOneProcess) {
  TrainerOptions options = Options();
  options.lora = LoraOptions{4, 8, {"q_a_proj", "kv_b_proj", "gate_proj"}};
  options.adamw.eps = 1e-3;
  const TrainingRun single = Train(nullptr, false, {}, {}, options);
  gloo::rendezvous::HashStore store;
  std::vector<TrainingRun> ranks(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto dp = GlooCollectives::Connect(store, "dp" + std::to_string(rank), 0,
                                         1, {});
      auto cp = GlooCollectives::Connect(store, "cp", rank, 2, {});
      ASSERT_TRUE(dp.ok() && cp.ok());
      ranks[rank] = Train(dp->get(), false, {},
                          TokenParallelRank{nullptr, cp->get()}, options);
      EXPECT_TRUE((*cp)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(single.state.empty());
  for (const TrainingRun& rank : ranks) {
    ExpectSameSteps(rank, single);
    ExpectSameState(rank, single);
  }
}

// LoRA under EP2: the frozen experts are split, the adapters (on dense
// weights) are whole on both ranks and summed over the data-parallel group.
TEST(DataParallelTest, LoraUnderExpertParallelTakesTheStepsOfOneProcess) {
  TrainerOptions options = Options();
  options.lora = LoraOptions{4, 8, {"q_a_proj", "o_proj", "gate_proj"}};
  const TrainingRun single = Train(nullptr, false, {}, {}, options);
  const std::vector<TrainingRun> ranks =
      TrainOnTwoRanks(false, /*expert_parallel=*/true, options);
  ASSERT_FALSE(single.state.empty());
  for (const TrainingRun& rank : ranks) {
    ExpectSameSteps(rank, single);
    ExpectSameState(rank, single);
  }
}

// LoRA with the backend's tensors apart from the host (as on a GPU): the
// frozen weights, the adapters and their moments stay in the backend's
// memory, where the adapters are merged and trained; one rank, and DP2 with
// ZeRO-1 over groups in either place, equal the host runs bit for bit, the
// merged weights an export takes included.
TEST(DataParallelTest, LoraTrainsInTheBackendMemory) {
  TrainerOptions options = Options();
  options.lora = LoraOptions{4, 8, {"q_a_proj", "o_proj", "gate_proj"}};
  SeparateMemoryAllocator memory;
  const TrainingRun host = Train(nullptr, false, {}, {}, options);
  const TrainingRun device = Train(nullptr, false, {}, {}, options, &memory);
  ASSERT_FALSE(host.merged.empty());
  ExpectBitwiseSameRuns({device}, {host});
  EXPECT_EQ(device.merged, host.merged);
  ExpectTrainedOnTheDevice({device});
  const std::vector<TrainingRun> host_ranks =
      TrainOnTwoRanks(/*distributed_optimizer=*/true, false, options);
  for (BufferPlace place : {BufferPlace::kHost, BufferPlace::kDevice}) {
    const std::vector<TrainingRun> device_ranks =
        TrainOnTwoRanks(true, false, options, &memory, place);
    ExpectBitwiseSameRuns(device_ranks, host_ranks);
    for (size_t rank = 0; rank < host_ranks.size(); ++rank) {
      EXPECT_EQ(device_ranks[rank].merged, host_ranks[rank].merged);
    }
  }
}

// LoRA under EP2 x DP4 with the distributed optimizer: the expert-data
// groups have two ranks, but LoRA trains no routed expert, so no rank has an
// expert shard to gather (this once divided by zero inside gloo).
TEST(DataParallelTest, LoraUnderExpertParallelWithReplicatedExperts) {
  TrainerOptions options = Options();
  options.lora = LoraOptions{4, 8, {"q_a_proj", "o_proj", "gate_proj"}};
  const TrainingRun single = Train(nullptr, false, {}, {}, options);
  gloo::rendezvous::HashStore store;
  std::vector<TrainingRun> ranks(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      // Experts split over ranks {0, 1} and {2, 3}; rank r's experts are
      // replicated on rank r +- 2.
      auto dp = GlooCollectives::Connect(store, "dp", rank, 4, {});
      auto experts = GlooCollectives::Connect(
          store, "ep" + std::to_string(rank / 2), rank % 2, 2, {});
      auto expert_data = GlooCollectives::Connect(
          store, "edp" + std::to_string(rank % 2), rank / 2, 2, {});
      ASSERT_TRUE(dp.ok() && experts.ok() && expert_data.ok());
      ranks[rank] = Train(
          dp->get(), /*distributed_optimizer=*/true,
          ExpertParallelRank{experts->get(), expert_data->get()}, {}, options);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(single.state.empty());
  for (const TrainingRun& rank : ranks) {
    ExpectSameSteps(rank, single);
    ExpectSameState(rank, single);
  }
}

TEST(DataParallelTest, ExpertParallelNeedsDataParallel) {
  gloo::rendezvous::HashStore store;
  auto dp = GlooCollectives::Connect(store, "dp", 0, 1, {});
  auto ep = GlooCollectives::Connect(store, "ep", 0, 1, {});
  ASSERT_TRUE(dp.ok() && ep.ok());
  auto create = [&](Collectives* data_parallel, bool distributed_optimizer) {
    TrainerOptions options = Options();
    options.distributed_optimizer = distributed_optimizer;
    return Trainer::Create(
               options,
               std::make_unique<PretrainData>(
                   std::make_unique<HashedTokenDataset>(options.seq_length)),
               nullptr, std::make_unique<CpuBackend>(), data_parallel,
               std::nullopt, ExpertParallelRank{ep->get(), nullptr})
        .status();
  };
  absl::Status status = create(nullptr, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("folds over data parallelism"),
            std::string::npos)
      << status;
  EXPECT_TRUE(create(dp->get(), false).ok());
  EXPECT_TRUE(create(dp->get(), true).ok());
}

TEST(DataParallelTest, ShardsAreContiguousBalancedAndMayBeEmpty) {
  const ParameterShards two({10, 1, 1, 10, 3}, 2);
  EXPECT_EQ(two.first(0), 0);
  EXPECT_EQ(two.end(0), 3);  // 12 of 25 elements
  EXPECT_EQ(two.end(1), 5);
  const ParameterShards three({100, 1, 1}, 3);
  EXPECT_EQ(three.end(0), 1);
  EXPECT_EQ(three.first(1), three.end(1));  // nothing left for rank 1's share
  EXPECT_EQ(three.end(2), 3);
}

// ZeRO-1's exchanges on tensors in an arena (run where they lie) end as on
// tensors of their own (packed into blocks): each rank's shard summed, then
// every shard's values on every rank, bit for bit with two ranks.
TEST(DataParallelTest, ShardsInAnArenaExchangeAsPackedOnes) {
  const std::vector<std::vector<int64_t>> shapes = {{10}, {3, 5}, {1}, {70}};
  const ParameterShards shards({10, 15, 1, 70}, 2);
  // Rank r's value of element i of tensor t.
  auto value = [](int r, size_t t, int64_t i) {
    return std::sin(1.f + r * 7.f + t * 3.f + i * 0.37f) * (t + 1);
  };
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = GlooCollectives::Connect(store, "zero", rank, 2, {});
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<Tensor> arena = ZerosInOneAllocation(nullptr, shapes), owned;
      for (size_t t = 0; t < shapes.size(); ++t) {
        for (int64_t i = 0; i < arena[t].numel(); ++i) {
          arena[t].data()[i] = value(rank, t, i);
        }
        owned.push_back(Tensor(shapes[t]));
        owned[t].CopyFrom(arena[t]);
      }
      auto pointers = [](std::vector<Tensor>& tensors) {
        std::vector<Tensor*> out;
        for (Tensor& t : tensors) out.push_back(&t);
        return out;
      };
      ASSERT_NE(arena[0].arena(), nullptr);
      ASSERT_EQ(owned[0].arena(), nullptr);
      for (std::vector<Tensor>* tensors : {&arena, &owned}) {
        ASSERT_TRUE(shards.ReduceScatter(**group, pointers(*tensors)).ok());
      }
      for (int64_t t = shards.first(rank); t < shards.end(rank); ++t) {
        for (int64_t i = 0; i < arena[t].numel(); ++i) {
          EXPECT_EQ(arena[t].data()[i], value(0, t, i) + value(1, t, i));
          EXPECT_EQ(arena[t].data()[i], owned[t].data()[i]);
        }
      }
      // Each rank's weights as its shard's rank would have updated them.
      for (std::vector<Tensor>* tensors : {&arena, &owned}) {
        for (size_t t = 0; t < shapes.size(); ++t) {
          for (int64_t i = 0; i < (*tensors)[t].numel(); ++i) {
            (*tensors)[t].data()[i] = value(rank, t, i) * 2 + 1;
          }
        }
        ASSERT_TRUE(shards.AllGather(**group, pointers(*tensors)).ok());
      }
      for (int r = 0; r < 2; ++r) {
        for (int64_t t = shards.first(r); t < shards.end(r); ++t) {
          for (int64_t i = 0; i < arena[t].numel(); ++i) {
            EXPECT_EQ(arena[t].data()[i], value(r, t, i) * 2 + 1);
            EXPECT_EQ(arena[t].data()[i], owned[t].data()[i]);
          }
        }
      }
      EXPECT_TRUE((*group)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(DataParallelTest, RejectsMicroBatchesThatDoNotDivideOverRanks) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
          GlooCollectives::Connect(store, "dp", rank, 3, GlooOptions());
      ASSERT_TRUE(group.ok()) << group.status();
      TrainerOptions options = Options();
      absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
          options,
          std::make_unique<PretrainData>(
              std::make_unique<HashedTokenDataset>(options.seq_length)),
          nullptr, std::make_unique<CpuBackend>(), group->get());
      ASSERT_FALSE(trainer.ok());
      EXPECT_NE(trainer.status().message().find("data-parallel size 3"),
                std::string::npos)
          << trainer.status();
      // No rank closes its connections while another is still connecting.
      EXPECT_TRUE((*group)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(DataParallelTest, PipelineNeedsEveryStageOfTheLayout) {
  gloo::rendezvous::HashStore store;
  auto group = GlooCollectives::Connect(store, "pp", 0, 1, {});
  ASSERT_TRUE(group.ok()) << group.status();
  StageSlice stage;  // a rank's stage, but no plan of the layout
  stage.has_embedding = stage.has_loss = true;
  PipelineRank pipeline{group->get(), RingLinks(**group, **group), {stage}};
  const TrainerOptions options = Options();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<HashedTokenDataset>(options.seq_length)),
      nullptr, std::make_unique<CpuBackend>(), nullptr, pipeline);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(trainer.status().message().find("hold none of pp rank 0"),
            std::string::npos)
      << trainer.status();
}

TEST(DataParallelTest, InterleavedPipelineNeedsWholeGroupsOfMicroBatches) {
  // Two virtual stages per pp rank.
  const std::vector<StageSlice> stages =
      *PlanForModel(*PresetConfig("glm5.2-tiny"), "Et|t|tttt|ttmL", 2);
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto forward = GlooCollectives::Connect(store, "pp", rank, 2, {});
      auto backward = GlooCollectives::Connect(store, "ppb", rank, 2, {});
      ASSERT_TRUE(forward.ok() && backward.ok());
      PipelineRank pipeline{
          forward->get(), RingLinks(**forward, **backward), {}};
      for (const StageSlice& stage : stages) {
        if (stage.pp_rank == rank) pipeline.stages.push_back(stage);
      }
      TrainerOptions options = Options();
      options.global_batch_size = 3;  // 3 micro batches: not whole pairs
      absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
          options,
          std::make_unique<PretrainData>(
              std::make_unique<HashedTokenDataset>(options.seq_length)),
          nullptr, std::make_unique<CpuBackend>(), nullptr, pipeline);
      EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(trainer.status().message().find("multiple of pp 2"),
                std::string::npos)
          << trainer.status();
      EXPECT_TRUE((*forward)->Barrier().ok());
      EXPECT_TRUE((*backward)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace glm
