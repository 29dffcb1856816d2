// The planner's state bytes per rank equal what the trainer allocates.
//
// glm5.2-tiny, many splits: every rank of the split runs as a thread with
// its own Gloo groups of the split's rank grid, builds its trainer as a
// worker does and takes two steps; its weights and gradients are read off
// the trainer's tensors, the optimizer's moments are what the step added
// where the weights live (AdamW creates moments on first use there, in two
// flat buffers; LoRA's: those the steps wrote), LoRA adapters are the adapter
// tensors the trainer shows, with their gradients and the frozen copies of
// the held targets.
//
// glm5.2-mini: single ranks of large splits (the others' groups stand in by
// size only), weights and gradients after the trainer is built.
//
// Every rank is also checked in this trainer's CUDA bf16 mode
// (kFp32Bf16Copies): the same state plus the one allocation of bf16 copies
// the CUDA backend makes of the spans the trainer hands it
// (ProductWeights of the rank's model, laid out by kernels/bf16_copy_layout.h
// as kernels/cuda/bf16_weight_copies.cc allocates them).
#include "planner/rank_state.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "model/weight_copies.h"
#include "parallel/gloo_collectives.h"
#include "parallel/process_groups.h"
#include "parallel/rank_tensors.h"
#include "training/trainer.h"
#include "training/training_data.h"

namespace glm {
namespace {

constexpr int64_t kFp32Bytes = 4;

// Token windows from an integer hash: any ids in the vocabulary will do.
class HashedTokens : public TokenSampleDataset {
 public:
  HashedTokens(int64_t seq_length, int64_t vocab)
      : seq_length_(seq_length), vocab_(vocab) {}
  int64_t size() const override { return 256; }
  int64_t seq_length() const override { return seq_length_; }
  std::vector<int32_t> Sample(int64_t index) const override {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i <= seq_length_; ++i) {
      ids.push_back(static_cast<int32_t>((index * 2654435761u + i * 40503u) %
                                         static_cast<uint64_t>(vocab_)));
    }
    return ids;
  }

 private:
  int64_t seq_length_, vocab_;
};

TrainerOptions OptionsOf(const PlanJob& job) {
  TrainerOptions o;
  o.model = job.model;
  o.train_iters = 2;
  o.global_batch_size = job.global_batch_size;
  o.micro_batch_size = job.micro_batch_size;
  o.seq_length = job.seq_length;
  o.schedule = {3e-3, 3e-4, 0, 1};
  o.seed = 7;
  o.distributed_optimizer = job.distributed_optimizer;
  if (job.kind == TrainingKind::kLora) o.lora = job.lora;
  return o;
}

// The groups a rank's trainer takes, from its process groups, as
// worker/training_job.cc hands them over.
struct TrainerGroups {
  Collectives* data_parallel = nullptr;
  std::optional<PipelineRank> pipeline;
  std::optional<ExpertParallelRank> experts;
  std::optional<TokenParallelRank> tokens;
};

// `edges` null: no links (trainers that never step).
TrainerGroups GroupsOf(const SplitPlan& plan, int rank,
                       const std::function<Collectives&(GroupKind)>& group,
                       PipelineEdges* edges) {
  TrainerGroups g;
  g.data_parallel = &group(GroupKind::kDp);
  if (plan.split.pp > 1) {
    PipelineRank pipeline;
    pipeline.plan = plan.stages;
    pipeline.group = &group(GroupKind::kPp);
    if (edges != nullptr) pipeline.links = edges->Links();
    pipeline.stages = plan.StagesOf(plan.grid.ranks[rank].pp);
    g.pipeline = pipeline;
  }
  if (plan.split.ep > 1) {
    g.experts = ExpertParallelRank{&group(GroupKind::kEp),
                                   &group(GroupKind::kExpertDp)};
  }
  if (plan.split.tp > 1 || plan.split.cp > 1) {
    g.tokens =
        TokenParallelRank{plan.split.tp > 1 ? &group(GroupKind::kTp) : nullptr,
                          plan.split.cp > 1 ? &group(GroupKind::kCp) : nullptr};
  }
  return g;
}

// `params` null: the trainer allocates and initializes the rank's share.
absl::StatusOr<std::unique_ptr<Trainer>> BuildTrainer(
    const PlanJob& job, const TrainerGroups& g,
    std::unique_ptr<ModelParameters> params = nullptr) {
  return Trainer::Create(
      OptionsOf(job),
      std::make_unique<PretrainData>(
          std::make_unique<HashedTokens>(job.seq_length, job.model.vocab_size)),
      std::move(params), std::make_unique<CpuBackend>(), g.data_parallel,
      g.pipeline, g.experts, g.tokens);
}

// Weights (values, buffers included) and gradients as the trainer holds
// them, and the bf16 copies a CUDA backend in bf16 would allocate of the
// product weights the trainer hands it (Backend::RefreshComputeCopies); with
// LoRA also its adapters (as State() shows them: whole, so without tensor
// parallelism), their gradients (same shapes, training/lora.h) and the
// frozen copy of each held target weight.
StateBytes HeldBytes(Trainer& trainer, const PlanJob& job) {
  StateBytes bytes;
  bytes.copies = ProductWeightCopyBytes(trainer.params());
  for (const NamedTensor& named : trainer.params().Named()) {
    bytes.weights += kFp32Bytes * named.value->numel();
    if (named.grad != nullptr) {
      bytes.gradients += kFp32Bytes * named.grad->numel();
    }
  }
  if (job.kind != TrainingKind::kLora) return bytes;
  for (const StateTensor& adapter : trainer.State().model) {
    bytes.adapters += 2 * kFp32Bytes * adapter.tensor->numel();
  }
  for (const NamedTensor& named : trainer.params().Named()) {
    for (const std::string& module : job.lora.target_modules) {
      if (absl::EndsWith(named.name, absl::StrCat(".", module, ".weight"))) {
        bytes.adapters += kFp32Bytes * named.value->numel();
      }
    }
  }
  return bytes;
}

// LoRA's AdamW moments, which live beside the adapters in host memory: the
// ones the steps wrote (State() lists every adapter's, making the others at
// zero). After two steps every updated adapter has a nonzero second moment
// (at the first, B = 0 leaves A's gradient zero).
int64_t LoraMomentBytes(Trainer& trainer) {
  const TrainingState state = trainer.State();
  int64_t bytes = 0;
  for (const StateTensor& moment : state.optimizer) {
    if (moment.name.rfind("exp_avg_sq/", 0) != 0) continue;
    const std::vector<float> v = moment.tensor->HostValues();
    if (std::any_of(v.begin(), v.end(), [](float x) { return x != 0; })) {
      bytes += 2 * kFp32Bytes * moment.tensor->numel();
    }
  }
  return bytes;
}

void ExpectSame(const StateBytes& got, const StateBytes& want,
                const std::string& where) {
  EXPECT_EQ(got.weights, want.weights) << where << ": weights";
  EXPECT_EQ(got.gradients, want.gradients) << where << ": gradients";
  EXPECT_EQ(got.master, want.master) << where << ": master weights";
  EXPECT_EQ(got.moments, want.moments) << where << ": AdamW moments";
  EXPECT_EQ(got.adapters, want.adapters) << where << ": LoRA adapters";
  EXPECT_EQ(got.copies, want.copies) << where << ": bf16 weight copies";
}

PlanJob InCudaBf16Mode(PlanJob job) {
  job.precision = Precision::kFp32Bf16Copies;
  return job;
}

// `measured` (copies included) against the planner's state of the rank at
// `rank` in this trainer's fp32 store (no copies) and in its CUDA bf16 mode;
// without a step taken, no moments.
void ExpectBothStores(StateBytes measured, const PlanJob& job,
                      const SplitPlan& plan, int rank, bool stepped,
                      const std::string& where) {
  EXPECT_GT(measured.copies, 0) << where;
  const PlanJob copies = InCudaBf16Mode(job);
  for (const PlanJob* store : {&job, &copies}) {
    StateBytes want = RankStateBytes(*store, plan, plan.grid.ranks[rank]);
    if (!stepped) want.moments = 0;
    StateBytes got = measured;
    if (store->precision == Precision::kFp32) got.copies = 0;
    ExpectSame(got, want,
               absl::StrCat(where, ", ", PrecisionName(store->precision)));
  }
}

// Runs every rank of `split` as a thread through one step and checks each
// against the planner. A rank's weights come from the trainer's own rule
// (RankShareOf, HeldTensorsOf), initialized on the host and handed over on a
// counting allocator; the trainer keeps them there, and AdamW makes the
// moments where the tensors live, so the allocator's growth over the step is
// the moments the trainer made.
void CheckEveryRank(const PlanJob& job, int world, const Split& split) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string name = SplitName(*plan);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<StateBytes> measured(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<ProcessGroups> groups = ProcessGroups::Create(
          plan->grid, rank, GlooFactory(store, GlooOptions()));
      ASSERT_TRUE(groups.ok()) << groups.status();
      const TrainerGroups g = GroupsOf(
          *plan, rank,
          [&](GroupKind kind) -> Collectives& { return groups->group(kind); },
          groups->pipeline_edges());
      SeparateMemoryAllocator counted;
      ModelParameters host(
          job.model, HeldTensorsOf(job.model, RankShareOf(g.pipeline, g.experts,
                                                          g.tokens)));
      host.InitRandom(7);
      absl::StatusOr<std::unique_ptr<Trainer>> trainer =
          BuildTrainer(job, g, MirrorParameters(host, &counted));
      ASSERT_TRUE(trainer.ok()) << name << ": " << trainer.status();
      const int64_t built = counted.bytes_in_use();
      const int64_t built_allocations = counted.allocations();
      while (!(*trainer)->Done()) {
        absl::StatusOr<v1::StepMetrics> step = (*trainer)->Step();
        ASSERT_TRUE(step.ok()) << name << ": " << step.status();
        ASSERT_EQ(step->skipped_iterations(), 0) << name;
      }
      measured[rank] = HeldBytes(**trainer, job);
      measured[rank].moments = job.kind == TrainingKind::kLora
                                   ? LoraMomentBytes(**trainer)
                                   : counted.bytes_in_use() - built;
      if (job.kind != TrainingKind::kLora) {
        // One flat buffer per moment.
        EXPECT_EQ(counted.allocations() - built_allocations,
                  measured[rank].moments > 0 ? 2 : 0)
            << name << " rank " << rank;
      }
      // A checkpoint gathers every rank's moments; releasing it afterwards
      // returns the rank to its share (the distributed optimizer's saving).
      const int64_t before_checkpoint = counted.bytes_in_use();
      ASSERT_TRUE((*trainer)->GatherCheckpointState().ok()) << name;
      (*trainer)->ReleaseCheckpointState();
      EXPECT_EQ(counted.bytes_in_use(), before_checkpoint) << name;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    ExpectBothStores(measured[rank], job, *plan, rank, /*stepped=*/true,
                     absl::StrCat(name, " rank ", rank));
  }
}

PlanJob TinyJob() {
  PlanJob job;
  job.model = *PresetConfig("glm5.2-tiny");
  job.precision = Precision::kFp32;
  job.seq_length = 16;
  job.global_batch_size = 8;
  job.micro_batch_size = 1;
  job.distributed_optimizer = false;
  return job;
}

PlanJob Zero1(PlanJob job) {
  job.distributed_optimizer = true;
  return job;
}

PlanJob Lora(PlanJob job) {
  job.kind = TrainingKind::kLora;
  job.lora.target_modules = {"q_a_proj", "q_b_proj", "kv_b_proj", "o_proj",
                             "gate_proj"};
  return job;
}

Split Of(int tp, int pp, int cp, int ep, int vpp = 1) {
  Split split;
  split.tp = tp;
  split.pp = pp;
  split.cp = cp;
  split.ep = ep;
  split.vpp = vpp;
  return split;
}

TEST(RankStateTest, OneRank) { CheckEveryRank(TinyJob(), 1, Of(1, 1, 1, 1)); }

TEST(RankStateTest, DataParallel) {
  CheckEveryRank(TinyJob(), 2, Of(1, 1, 1, 1));
  CheckEveryRank(Zero1(TinyJob()), 4, Of(1, 1, 1, 1));
}

TEST(RankStateTest, PipelineParallel) {
  CheckEveryRank(TinyJob(), 2, Of(1, 2, 1, 1));
  CheckEveryRank(TinyJob(), 2, Of(1, 2, 1, 1, /*vpp=*/2));
  CheckEveryRank(Zero1(TinyJob()), 4, Of(1, 2, 1, 1));
}

TEST(RankStateTest, ExpertParallel) {
  CheckEveryRank(TinyJob(), 2, Of(1, 1, 1, 2));
  CheckEveryRank(Zero1(TinyJob()), 4, Of(1, 1, 1, 2));
  CheckEveryRank(Zero1(TinyJob()), 4, Of(1, 2, 1, 2));
}

TEST(RankStateTest, TensorAndContextParallel) {
  CheckEveryRank(TinyJob(), 2, Of(2, 1, 1, 1));
  CheckEveryRank(TinyJob(), 2, Of(1, 1, 2, 1));
  CheckEveryRank(TinyJob(), 4, Of(2, 1, 2, 1));
  CheckEveryRank(Zero1(TinyJob()), 4, Of(2, 1, 1, 2));
  CheckEveryRank(TinyJob(), 4, Of(2, 2, 1, 1));
}

TEST(RankStateTest, Lora) {
  CheckEveryRank(Lora(TinyJob()), 1, Of(1, 1, 1, 1));
  CheckEveryRank(Lora(TinyJob()), 2, Of(1, 2, 1, 1));
  CheckEveryRank(Lora(TinyJob()), 2, Of(1, 1, 1, 2));
  // With ZeRO-1 under expert parallelism (expert-data groups of 2) the
  // trainer all-gathers an empty routed-expert shard list and gloo divides
  // by zero; data parallelism alone is checked.
  CheckEveryRank(Lora(Zero1(TinyJob())), 2, Of(1, 1, 1, 1));
}

// glm5.2-tiny with sizes that leave most tensors off 16-byte multiples:
// the bf16 copies' padding (each copy starts on 16 bytes) and the moments'
// (each tensor's on 256) both count.
PlanJob OddSizesJob() {
  PlanJob job = TinyJob();
  job.model.hidden_size = 66;
  job.model.q_lora_rank = 30;
  job.model.kv_lora_rank = 30;
  job.model.intermediate_size = 130;
  job.model.moe_intermediate_size = 30;
  job.model.index_n_heads = 3;
  return job;
}

TEST(RankStateTest, SizesOffSixteenBytes) {
  ModelParameters whole(OddSizesJob().model);
  int64_t unpadded = 0;
  for (const ConstFloatSpan& span : ProductWeights(whole))
    unpadded += 2 * span.size;
  ASSERT_GT(ProductWeightCopyBytes(whole), unpadded);
  CheckEveryRank(OddSizesJob(), 1, Of(1, 1, 1, 1));
  CheckEveryRank(OddSizesJob(), 2, Of(1, 2, 1, 1));
  CheckEveryRank(OddSizesJob(), 2, Of(1, 1, 1, 2));
  CheckEveryRank(Zero1(OddSizesJob()), 4, Of(2, 1, 1, 1));
}

// A group of a given size standing in for one whose other members do not
// run: building a trainer only asks groups for their rank and size.
class SizeOnlyGroup : public Collectives {
 public:
  SizeOnlyGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduce(float*, int64_t, ReduceOp) override { return No(); }
  absl::Status AllReduceSum(int64_t*, int64_t) override { return No(); }
  absl::Status Broadcast(float*, int64_t, int) override { return No(); }
  absl::Status AllGather(const float*, int64_t, float*) override {
    return No();
  }
  absl::Status ReduceScatter(const float*, int64_t, float*, ReduceOp) override {
    return No();
  }
  absl::Status AllToAllV(const float*, const std::vector<int64_t>&, float*,
                         const std::vector<int64_t>&) override {
    return No();
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float*, int64_t,
                                                         int) override {
    return No();
  }
  absl::Status Recv(float*, int64_t, int) override { return No(); }
  absl::Status Barrier() override { return No(); }

 private:
  static absl::Status No() {
    return absl::UnimplementedError("a size-only group does not communicate");
  }
  int rank_, size_;
};

// Builds one rank's trainer with size-only groups and checks its weights
// and gradients (and adapters) against the planner.
void CheckOneRank(const PlanJob& job, int world, const Split& split, int rank) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::unique_ptr<SizeOnlyGroup>> groups;
  auto group = [&](GroupKind kind) -> Collectives& {
    const std::vector<int> members = GroupMembers(plan->grid, rank, kind);
    const int index = static_cast<int>(
        std::find(members.begin(), members.end(), rank) - members.begin());
    groups.push_back(std::make_unique<SizeOnlyGroup>(
        index, static_cast<int>(members.size())));
    return *groups.back();
  };
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      BuildTrainer(job, GroupsOf(*plan, rank, group, /*edges=*/nullptr));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ExpectBothStores(HeldBytes(**trainer, job), job, *plan, rank,
                   /*stepped=*/false,
                   absl::StrCat(SplitName(*plan), " rank ", rank));
}

PlanJob MiniJob() {
  PlanJob job;
  job.model = *PresetConfig("glm5.2-mini");
  job.precision = Precision::kFp32;
  job.seq_length = 32;
  job.global_batch_size = 64;
  job.micro_batch_size = 1;
  return job;
}

// Middle pipeline ranks: a few decoder layers each, no embedding or head.
TEST(RankStateTest, MiniPipelineAndExpertRanks) {
  CheckOneRank(MiniJob(), 32, Of(1, 4, 1, 8), /*rank=*/8);    // pp rank 1
  CheckOneRank(MiniJob(), 64, Of(1, 4, 1, 16), /*rank=*/37);  // pp rank 2
  CheckOneRank(MiniJob(), 16, Of(1, 4, 1, 4, /*vpp=*/2), 5);  // pp rank 1
}

TEST(RankStateTest, MiniTensorParallelRanks) {
  CheckOneRank(MiniJob(), 32, Of(2, 4, 1, 8), /*rank=*/9);  // tp rank 1
  CheckOneRank(MiniJob(), 64, Of(4, 4, 2, 8), /*rank=*/22);
}

TEST(RankStateTest, MiniLoraRanks) {
  CheckOneRank(Lora(MiniJob()), 32, Of(1, 4, 1, 8), /*rank=*/16);
  CheckOneRank(Lora(MiniJob()), 64, Of(1, 4, 1, 16), /*rank=*/20);
}

}  // namespace
}  // namespace glm
