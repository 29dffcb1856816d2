// This trainer's activation model against what the model really allocates:
// the CPU backend's ops run unchanged while every tensor a forward or backward
// pass makes comes from a counting allocator, so the bytes kept after a
// forward pass and the peak during backward are measured exactly. The fp32
// store runs on the CPU backend, kFp32Bf16Copies on Bf16ActivationsCpuBackend
// (the CUDA bf16 mode's activation types on the CPU's kernels, so planned
// with the CPU's kernel temporaries).
//
// Kept activations must match to the byte; the backward peak (the
// temporaries of the largest moment, which the planner takes from reading
// the passes) within a few percent of the total.
#include "planner/activation_memory.h"

#include <initializer_list>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16_activations_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "model/glm_model.h"
#include "model/mla_attention.h"
#include "model/step_totals.h"
#include "model/token_parallel.h"
#include "parallel/gloo_collectives.h"
#include "parallel/rank_tensors.h"
#include "parallel/stage_model.h"

namespace glm {
namespace {

// `Base` with its tensors on a counting allocator.
template <typename Base>
class Counting : public Base {
 public:
  Allocator* allocator() override { return &counter_; }
  const SeparateMemoryAllocator& counter() const { return counter_; }

 private:
  SeparateMemoryAllocator counter_;
};

// The backend a job's store runs on, counting what it allocates.
class CountingBackend {
 public:
  explicit CountingBackend(const PlanJob& job) {
    if (job.precision == Precision::kFp32Bf16Copies) {
      auto bf16 = std::make_unique<Counting<Bf16ActivationsCpuBackend>>();
      counter_ = &bf16->counter();
      backend_ = std::move(bf16);
    } else {
      auto fp32 = std::make_unique<Counting<CpuBackend>>();
      counter_ = &fp32->counter();
      backend_ = std::move(fp32);
    }
  }
  Backend* get() { return backend_.get(); }
  const SeparateMemoryAllocator& counter() const { return *counter_; }

 private:
  std::unique_ptr<Backend> backend_;
  const SeparateMemoryAllocator* counter_ = nullptr;
};

struct Measured {
  int64_t kept = 0;  // after forward
  int64_t peak = 0;  // during forward and backward
};

Batch BatchOf(const PlanJob& job) {
  std::vector<std::vector<int32_t>> rows;
  for (int64_t r = 0; r < job.micro_batch_size; ++r) {
    std::vector<int32_t> row;
    for (int64_t t = 0; t < job.seq_length; ++t) {
      row.push_back(
          static_cast<int32_t>((r * 7919 + t * 104729) % job.model.vocab_size));
    }
    rows.push_back(row);
  }
  return Batch::FromSequences(rows);
}

// What a training step asks of the model: losses and expert loads only,
// the heads' losses fused (training/trainer.cc's StepLossOptions), layers
// recomputed when the job says so, queries in the latent form and routed
// experts in chunks of tokens as it says.
LossOptions Losses(const PlanJob& job) {
  LossOptions options;
  options.indexer_loss_coeff = 0.001f;
  options.return_logits = false;
  options.record_selections = false;
  options.fuse_head_loss = true;
  options.recompute_layers = job.recompute == Recompute::kFull;
  options.latent_attention_from = job.latent_attention_from;
  options.expert_chunk_tokens = job.expert_chunk_tokens;
  return options;
}

// The whole model on one rank, as the trainer runs it without pipeline,
// tensor or context parallelism.
Measured MeasureOneModel(const PlanJob& job) {
  ModelParameters params(job.model);
  params.InitRandom(3);
  CountingBackend backend(job);
  GlmModel model(&params, backend.get(), Losses(job));
  // A step's totals, as the trainer passes them (under recomputation each
  // layer's indexer loss is then formed in its backward); in host memory,
  // apart from the activations counted.
  StepTotals step(nullptr);
  absl::StatusOr<ForwardResult> result = model.Forward(BatchOf(job), &step);
  EXPECT_TRUE(result.ok()) << result.status();
  Measured measured;
  measured.kept = backend.counter().bytes_in_use();
  EXPECT_TRUE(model.Backward().ok());
  measured.peak = backend.counter().peak_bytes();
  return measured;
}

// One pipeline stage with only its tensors allocated.
Measured MeasureStage(const PlanJob& job, const SplitPlan& plan,
                      const StageSlice& stage) {
  RankShare share;
  share.plan = plan.stages;
  share.pp_rank = stage.pp_rank;
  ModelParameters params(job.model, HeldTensorsOf(job.model, share));
  params.InitRandom(3);
  CountingBackend backend(job);
  absl::StatusOr<StageModel> model =
      StageModel::Create(&params, backend.get(), Losses(job), stage);
  EXPECT_TRUE(model.ok()) << model.status();
  const Batch batch = BatchOf(job);
  const int64_t tokens = static_cast<int64_t>(batch.input_ids.size());
  Tensor input({tokens, job.model.hidden_size}, nullptr);
  for (float& x : input.values()) x = 0.01f;
  StageActivations acts;
  EXPECT_TRUE(model->Forward(batch, input, &acts).ok());
  Measured measured;
  measured.kept = backend.counter().bytes_in_use();
  Tensor d_output(input.shape(), nullptr), d_input;
  for (float& x : d_output.values()) x = 1e-3f;
  EXPECT_TRUE(model->Backward(acts, d_output, &d_input).ok());
  measured.peak = backend.counter().peak_bytes();
  return measured;
}

// The planner's prediction in the measurement's terms.
Measured PredictedOf(const StageActivationBytes& predicted) {
  const int64_t saved = DeviceBytes(predicted.saved);
  return {saved, saved + DeviceBytes(predicted.transient)};
}

void ExpectMatches(const Measured& measured,
                   const StageActivationBytes& predicted,
                   const std::string& where) {
  const Measured want = PredictedOf(predicted);
  EXPECT_EQ(measured.kept, want.kept) << where << ": kept after forward";
  const double peak = static_cast<double>(want.peak);
  std::cout << where << ": kept " << measured.kept << " B (predicted "
            << want.kept << "), peak " << measured.peak << " B (predicted "
            << want.peak << ")\n";
  EXPECT_NEAR(measured.peak, peak, 0.05 * peak) << where << ": peak";
}

PlanJob Job(const std::string& preset, int64_t seq, int64_t micro_batch,
            int64_t latent_attention_from = kDefaultLatentAttentionFrom,
            Precision precision = Precision::kFp32) {
  PlanJob job;
  job.model = *PresetConfig(preset);
  job.precision = precision;
  job.device = RankDevice::kCpu;
  job.seq_length = seq;
  job.micro_batch_size = micro_batch;
  job.global_batch_size = micro_batch;
  job.latent_attention_from = latent_attention_from;
  return job;
}

// The planner's activations of `job` run as one model (no split).
StageActivationBytes PredictOneModel(const PlanJob& job) {
  const Split one;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 1, one);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  absl::StatusOr<StageActivationBytes> predicted =
      StageActivationMemory(job, one, plan->stages[0]);
  EXPECT_TRUE(predicted.ok()) << predicted.status();
  return predicted.ok() ? *std::move(predicted) : StageActivationBytes();
}

// One model: the planner's prediction against its allocations.
void ExpectOneModelMatches(const PlanJob& job, const std::string& where) {
  ExpectMatches(MeasureOneModel(job), PredictOneModel(job), where);
}

// Every stage of a pp-stage split against what that stage allocates.
void ExpectStagesMatch(const PlanJob& job, int pp, const std::string& where) {
  Split split;
  split.pp = pp;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, pp, split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const StageSlice& stage : plan->stages) {
    absl::StatusOr<StageActivationBytes> predicted =
        StageActivationMemory(job, split, stage);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    ExpectMatches(MeasureStage(job, *plan, stage), *predicted,
                  absl::StrCat(where, StageName(stage.stage, split.pp)));
  }
}

TEST(ActivationMemoryTest, OneModelMatchesWhatTheModelAllocates) {
  for (const char* preset : {"glm5.2-tiny", "glm5-tiny"}) {
    for (const PlanJob& job : {Job(preset, 64, 2), Job(preset, 8, 1)}) {
      ExpectOneModelMatches(job, absl::StrCat(preset, " seq ", job.seq_length));
    }
  }
}

// training.recomputeActivations: each layer keeps its input and records and
// is run again in the backward.
TEST(ActivationMemoryTest, RecomputedLayersMatchWhatTheModelAllocates) {
  for (const char* preset : {"glm5.2-tiny", "glm5-tiny"}) {
    PlanJob job = Job(preset, 64, 2);
    job.recompute = Recompute::kFull;
    ExpectOneModelMatches(job, absl::StrCat(preset, " recomputed"));
  }
  PlanJob job = Job("glm5.2-tiny", 64, 2);
  job.recompute = Recompute::kFull;
  Split pp2;
  pp2.pp = 2;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 2, pp2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<StageActivationBytes> refused =
      StageActivationMemory(job, pp2, plan->stages[0]);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ActivationMemoryTest, PipelineStagesMatchWhatTheyAllocate) {
  ExpectStagesMatch(Job("glm5.2-tiny", 64, 2), 4, "");
}

// glm5.2-mini's own shapes: the middle stage of a 6-stage layout (two
// decoder layers) with its tensors only.
TEST(ActivationMemoryTest, MiniStageMatchesWhatItAllocates) {
  const PlanJob job = Job("glm5.2-mini", 128, 1);
  Split split;
  split.pp = 6;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 6, split);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const StageSlice& stage = plan->stages[2];
  ASSERT_GT(stage.num_layers(), 0) << plan->layout;
  absl::StatusOr<StageActivationBytes> predicted =
      StageActivationMemory(job, split, stage);
  ASSERT_TRUE(predicted.ok());
  ExpectMatches(MeasureStage(job, *plan, stage), *predicted, plan->layout);
}

// Under tensor and context parallelism every rank runs the whole model on its
// share of the tokens (threads with Gloo groups of their own).
Measured MeasureTokenParallelRank(const PlanJob& job, const SplitPlan& plan,
                                  gloo::rendezvous::Store& store, int rank) {
  const int tp = plan.split.tp, cp = plan.split.cp;
  const int tp_rank = rank % tp, cp_rank = rank / tp;
  auto join = [&](const std::string& key, int member,
                  int size) -> std::unique_ptr<GlooCollectives> {
    if (size == 1) return nullptr;
    return *GlooCollectives::Connect(store, key, member, size, GlooOptions());
  };
  std::unique_ptr<GlooCollectives> tensor =
      join(absl::StrCat("tp-", cp_rank), tp_rank, tp);
  std::unique_ptr<GlooCollectives> context =
      join(absl::StrCat("cp-", tp_rank), cp_rank, cp);
  RankShare share;
  share.tp = tp;
  share.tp_rank = tp_rank;
  ModelParameters params(job.model, HeldTensorsOf(job.model, share));
  params.InitRandom(3);
  TokenParallel parallel(tensor.get(), context.get());
  CountingBackend backend(job);
  absl::StatusOr<StageModel> model =
      StageModel::Create(&params, backend.get(), Losses(job), plan.stages[0]);
  EXPECT_TRUE(model.ok()) << model.status();
  model->set_token_parallel(&parallel);
  StageActivations acts;
  EXPECT_TRUE(model->Forward(BatchOf(job), Tensor(), &acts).ok());
  Measured measured;
  measured.kept = backend.counter().bytes_in_use();
  Tensor d_input;
  EXPECT_TRUE(model->Backward(acts, Tensor(), &d_input).ok());
  measured.peak = backend.counter().peak_bytes();
  for (GlooCollectives* group : {tensor.get(), context.get()}) {
    if (group != nullptr) {
      EXPECT_TRUE(group->Barrier().ok());
    }
  }
  return measured;
}

// Latent queries asked for (from the 40th): tensor and context ranks keep the
// per-head form.
TEST(ActivationMemoryTest, TokenParallelRanksMatchWhatTheyAllocate) {
  const PlanJob job = Job("glm5.2-tiny", 64, 2, 40);
  for (const auto& [tp, cp] : {std::pair<int, int>{2, 1}, {1, 2}, {2, 2}}) {
    Split split;
    split.tp = tp;
    split.cp = cp;
    absl::StatusOr<SplitPlan> plan = PlanSplit(job, tp * cp, split);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<StageActivationBytes> predicted =
        StageActivationMemory(job, split, plan->stages[0]);
    ASSERT_TRUE(predicted.ok());
    gloo::rendezvous::HashStore store;
    std::vector<Measured> ranks(tp * cp);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < tp * cp; ++rank) {
      threads.emplace_back([&, rank] {
        ranks[rank] = MeasureTokenParallelRank(job, *plan, store, rank);
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int rank = 0; rank < tp * cp; ++rank) {
      ExpectMatches(ranks[rank], *predicted,
                    absl::StrCat(SplitName(*plan), " rank ", rank));
    }
  }
}

// One model with the queries from `from` on in the latent form (a micro batch
// of 2 x 64 tokens; 0: none), recomputed or not, for both presets; then every
// stage of PP4 (bf16 activations: with the form off too).
void ExpectLatentQueriesMatch(Precision precision, const std::string& tag,
                              std::initializer_list<int64_t> pp4_froms) {
  for (const char* preset : {"glm5.2-tiny", "glm5-tiny"}) {
    for (const Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
      for (const int64_t from : {int64_t{40}, int64_t{0}}) {
        PlanJob job = Job(preset, 64, 2, from, precision);
        job.recompute = recompute;
        ExpectOneModelMatches(
            job, absl::StrCat(preset, tag, " latent from ", from, " ",
                              RecomputeName(recompute)));
      }
    }
  }
  for (const int64_t from : pp4_froms) {
    ExpectStagesMatch(Job("glm5.2-tiny", 64, 2, from, precision), 4,
                      absl::StrCat(tag, " latent from ", from, ", "));
  }
}

// Queries from latent_attention_from on in the latent form: the layers
// without an indexer, every layer when they are recomputed (the indexer loss
// then formed in the backward), none when the form is off; and under tensor
// or context parallelism, none.
TEST(ActivationMemoryTest, LatentQueriesMatchWhatTheModelAllocates) {
  ExpectLatentQueriesMatch(Precision::kFp32, "", {40});
}

// The CUDA bf16 mode's activation types (Bf16ActivationsCpuBackend), per
// head and with latent queries.
TEST(ActivationMemoryTest, Bf16ActivationsMatchWhatTheModelAllocates) {
  ExpectLatentQueriesMatch(Precision::kFp32Bf16Copies, " bf16 activations",
                           {40, 0});
}

// A micro batch of 2 x 64 tokens with its routed experts in chunks of 48
// tokens (48, 48 and 32), each grouped on its own: one model, recomputed
// (each chunk's rows formed again in its backward, the MTP layer's too) or
// not, then every stage of PP4.
void ExpectExpertChunksMatch(Precision precision, const std::string& tag) {
  constexpr int64_t kChunkTokens = 48;
  for (const Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    PlanJob job =
        Job("glm5.2-tiny", 64, 2, kDefaultLatentAttentionFrom, precision);
    job.recompute = recompute;
    job.expert_chunk_tokens = kChunkTokens;
    ExpectOneModelMatches(job, absl::StrCat(tag, "experts in chunks, ",
                                            RecomputeName(recompute)));
  }
  PlanJob job =
      Job("glm5.2-tiny", 64, 2, kDefaultLatentAttentionFrom, precision);
  job.expert_chunk_tokens = kChunkTokens;
  ExpectStagesMatch(job, 4, absl::StrCat(tag, "experts in chunks, "));
}

TEST(ActivationMemoryTest, ExpertChunksMatchWhatTheModelAllocates) {
  ExpectExpertChunksMatch(Precision::kFp32, "");
  ExpectExpertChunksMatch(Precision::kFp32Bf16Copies, "bf16 activations, ");
}

// Recomputed layers hold one chunk's expert rows and their gradients at a
// time: the smaller the chunk, the smaller the backward's peak, predicted
// and measured (the whole micro batch in one piece first). glm5.2-tiny's
// experts made eight times as wide, so that the routed rows' moment stays
// the layer's largest down to small chunks (at its own width the attention's
// backward takes over from chunks of 48 tokens).
TEST(ActivationMemoryTest, RecomputedPeakFollowsTheExpertChunk) {
  PlanJob job = Job("glm5.2-tiny", 64, 2);
  job.model.moe_intermediate_size *= 8;
  job.recompute = Recompute::kFull;
  Measured larger_measured, larger_predicted;
  for (const int64_t chunk_tokens : {0, 48, 16}) {
    job.expert_chunk_tokens = chunk_tokens;
    const Measured measured = MeasureOneModel(job);
    const StageActivationBytes predicted = PredictOneModel(job);
    ExpectMatches(measured, predicted,
                  absl::StrCat("recomputed, experts in chunks of ",
                               chunk_tokens, " tokens"));
    if (chunk_tokens != 0) {
      EXPECT_LT(measured.peak, larger_measured.peak) << chunk_tokens;
      EXPECT_LT(PredictedOf(predicted).peak, larger_predicted.peak)
          << chunk_tokens;
    }
    larger_measured = measured;
    larger_predicted = PredictedOf(predicted);
  }
}

// A GPU rank's cuDNN attention backward holds scratch in proportion to the
// pairs of its largest call (its workspace about 38 bytes a pair, its mask
// 2): a quarter of the pairs a call cuts it to about a third, the chunks'
// bf16 dK and dV buffers and their F32 sums added.
TEST(ActivationMemoryTest, AttentionScratchFollowsThePairsPerCall) {
  PlanJob job = Job("glm5.2-mini", 16384, 1, kDefaultLatentAttentionFrom,
                    Precision::kFp32Bf16Copies);
  job.device = RankDevice::kGpu;
  job.recompute = Recompute::kFull;
  const Split one;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 1, one);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto scratch = [&](int64_t pairs_per_call) {
    job.attention_pairs_per_call = pairs_per_call;
    absl::StatusOr<StageActivationBytes> bytes =
        StageActivationMemory(job, one, plan->stages[0]);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? static_cast<double>(bytes->scratch_bytes()) : 0.0;
  };
  const double whole = scratch(int64_t{1} << 28);  // one 16k call
  const double quarter = scratch(int64_t{1} << 26);
  EXPECT_GT(whole, 40.0 * (int64_t{1} << 28));
  EXPECT_GT(quarter, 40.0 * (int64_t{1} << 26));
  EXPECT_LT(quarter, whole / 2.5);
}

// This trainer recomputes whole layers only.
TEST(ActivationMemoryTest, SelectiveRecomputationIsRefusedForThisTrainer) {
  PlanJob job = Job("glm5.2-tiny", 64, 2);
  job.recompute = Recompute::kSelective;
  const Split one;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 1, one);
  ASSERT_TRUE(plan.ok());
  const absl::StatusOr<StageActivationBytes> acts =
      StageActivationMemory(job, one, plan->stages[0]);
  ASSERT_FALSE(acts.ok());
  EXPECT_NE(acts.status().message().find("--recompute"), std::string::npos);
}

}  // namespace
}  // namespace glm
