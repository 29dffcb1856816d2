#include "planner/attention_cap.h"

#include <cstdint>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "planner/evaluation.h"
#include "planner/hardware.h"
#include "planner/kernel_rates.h"
#include "planner/long_context_options.h"
#include "planner/plan_job.h"
#include "planner/split.h"
#include "planner/trainer_plan_job.h"
#include "training/trainer.h"

namespace glm {
namespace {

constexpr int64_t kDefaultPairs = kDefaultAttentionPairsPerCall;

// The long-context bench's job as a worker's options give it, in the CUDA
// bf16 mode.
PlanJob LongContextJob(int64_t seq) {
  return TrainerPlanJob(LongContextOptions(seq), /*bf16=*/true,
                        RankDevice::kGpu);
}

FittedAttentionPairs Fit(const PlanJob& job, const char* cluster) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, 1, Split{});
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<ClusterSpec> spec = ClusterPreset(cluster);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<FittedAttentionPairs> fitted =
      FitAttentionPairsPerCall(job, *plan, spec->device);
  EXPECT_TRUE(fitted.ok()) << fitted.status();
  return fitted.ok() ? *fitted : FittedAttentionPairs{};
}

// Run87 trained 64k on an H100 at 2^25 pairs a call (70.4 GiB); at the
// default the planner's 81.7 GiB is over the card's 79.6. The fit is the
// largest halving that fits: its double does not.
TEST(AttentionCapTest, LowersThePairsWhereTheDefaultDoesNotFit) {
  const PlanJob job = LongContextJob(65536);
  const FittedAttentionPairs h100 = Fit(job, "h100");
  absl::StatusOr<ClusterSpec> spec = ClusterPreset("h100");
  ASSERT_TRUE(spec.ok());
  EXPECT_GT(h100.job_peak_bytes, spec->device.memory_bytes);
  EXPECT_TRUE(h100.fits);
  EXPECT_LT(h100.pairs_per_call, kDefaultPairs);
  EXPECT_GE(h100.pairs_per_call, kMinFittedAttentionPairsPerCall);
  EXPECT_LE(h100.PeakBytes(), spec->device.memory_bytes);
  EXPECT_LT(h100.PeakBytes(), h100.job_peak_bytes);
  PlanJob doubled = job;
  doubled.attention_pairs_per_call = 2 * h100.pairs_per_call;
  const FittedAttentionPairs larger = Fit(doubled, "h100");
  EXPECT_GT(larger.job_peak_bytes, spec->device.memory_bytes);
}

// Where the default fits it stays: 64k on an H200, 4k on an H100.
TEST(AttentionCapTest, KeepsTheJobsPairsWhereTheyFit) {
  for (const auto& [seq, cluster] :
       {std::pair{int64_t{65536}, "h200"}, std::pair{int64_t{4096}, "h100"}}) {
    const FittedAttentionPairs fitted = Fit(LongContextJob(seq), cluster);
    EXPECT_TRUE(fitted.fits) << seq << " on " << cluster;
    EXPECT_EQ(fitted.pairs_per_call, kDefaultPairs) << seq << " on " << cluster;
    EXPECT_EQ(fitted.PeakBytes(), fitted.job_peak_bytes);
  }
}

// A job too long for any calls: the smallest tried, and fits false.
TEST(AttentionCapTest, SaysWhenNoPairsFit) {
  const FittedAttentionPairs fitted = Fit(LongContextJob(262144), "h100");
  EXPECT_FALSE(fitted.fits);
  EXPECT_EQ(fitted.pairs_per_call, kMinFittedAttentionPairsPerCall);
}

// glmctl plan without --attention-pairs-per-call evaluates a split as the
// worker will run it: 64k on an H100 fits with the fitted pairs, not with
// the default; splits of the model over ranks keep the job's pairs.
TEST(AttentionCapTest, EvaluateFitsThePairsAsAWorkerDoes) {
  absl::StatusOr<ClusterSpec> h100 = ClusterPreset("h100");
  ASSERT_TRUE(h100.ok());
  PlanJob job = LongContextJob(65536);
  absl::StatusOr<SplitPlan> one = PlanSplit(job, 1, Split{});
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<Evaluation> as_given =
      Evaluate(job, *one, *h100, KernelRates());
  ASSERT_TRUE(as_given.ok()) << as_given.status();
  EXPECT_FALSE(as_given->Fits(h100->device));
  job.fit_attention_pairs = true;
  absl::StatusOr<Evaluation> fitted = Evaluate(job, *one, *h100, KernelRates());
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_TRUE(fitted->Fits(h100->device));
  EXPECT_EQ(fitted->job.attention_pairs_per_call,
            Fit(LongContextJob(65536), "h100").pairs_per_call);
  job.recompute = Recompute::kNone;  // recomputation needs one model a rank
  Split tensor_parallel;
  tensor_parallel.tp = 2;
  absl::StatusOr<SplitPlan> two = PlanSplit(job, 2, tensor_parallel);
  ASSERT_TRUE(two.ok()) << two.status();
  absl::StatusOr<Evaluation> split =
      Evaluate(job, *two, *h100, KernelRates(), /*with_time=*/false);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->job.attention_pairs_per_call, kDefaultPairs);
}

// The worker's options carry over: the batch, recomputation, the store and
// the trainer's long-context settings.
TEST(AttentionCapTest, TrainerPlanJobKeepsTheOptions) {
  TrainerOptions options;
  options.seq_length = 8192;
  options.global_batch_size = 16;
  options.micro_batch_size = 2;
  options.loss.latent_attention_from = 4096;
  options.loss.expert_chunk_tokens = 2048;
  options.distributed_optimizer = true;
  options.lora = LoraOptions{4, 8, {"q_a_proj"}};
  const PlanJob job = TrainerPlanJob(options, /*bf16=*/false, RankDevice::kCpu);
  EXPECT_EQ(job.seq_length, 8192);
  EXPECT_EQ(job.micro_batches(), 8);
  EXPECT_EQ(job.recompute, Recompute::kNone);
  EXPECT_EQ(job.precision, Precision::kFp32);
  EXPECT_EQ(job.device, RankDevice::kCpu);
  EXPECT_EQ(job.latent_attention_from, 4096);
  EXPECT_EQ(job.expert_chunk_tokens, 2048);
  EXPECT_TRUE(job.distributed_optimizer);
  EXPECT_EQ(job.kind, TrainingKind::kLora);
  EXPECT_EQ(job.lora.rank, 4);
  EXPECT_EQ(job.attention_pairs_per_call, kDefaultPairs);
}

}  // namespace
}  // namespace glm
