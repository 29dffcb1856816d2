#include "planner/step_time.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "planner/evaluation.h"
#include "training/flops.h"

namespace glm {
namespace {

PlanJob Mini(Recompute recompute = Recompute::kNone) {
  PlanJob job;
  job.model = *PresetConfig("glm5.2-mini");
  job.seq_length = 4096;
  job.global_batch_size = 64;
  job.recompute = recompute;
  return job;
}

StepTime TimeOf(const PlanJob& job, int world, Split split,
                const ClusterSpec& cluster) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Evaluation> e = Evaluate(job, *plan, cluster, KernelRates());
  EXPECT_TRUE(e.ok()) << e.status();
  return e->time;
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

TEST(StepTimeTest, CountsTheTrainersFlops) {
  const StepTime t = TimeOf(Mini(), 8, Of(1, 2, 1, 4), *ClusterPreset("h200"));
  EXPECT_DOUBLE_EQ(t.model_flops, TrainingFlops(Mini().model, 4096, 64));
  EXPECT_NEAR(t.TflopsPerDevice(8), t.model_flops / t.Total() / 8 / 1e12, 1e-9);
}

// One 32k sequence, every layer recomputed: the queries from the 16,384th on
// attend in the latent form, each head reading kv_lora_rank + rope (576)
// columns of every selected key for its scores and kv_lora_rank (512) for
// its output, where the per-head form reads qk (256) and v (256).
TEST(StepTimeTest, LatentQueriesReadTheLatentRows) {
  PlanJob per_head = Mini(Recompute::kFull);
  per_head.precision = Precision::kFp32Bf16Copies;
  per_head.model.num_mtp_layers = 0;
  per_head.seq_length = 32768;
  per_head.global_batch_size = 1;
  per_head.latent_attention_from = 0;
  PlanJob latent = per_head;
  latent.latent_attention_from = 16384;
  // Keys the first n queries select: min(index_topk, t + 1) each.
  auto selected = [](int64_t n) {
    double keys = 0;
    for (int64_t t = 0; t < n; ++t) keys += std::min<int64_t>(2048, t + 1);
    return keys;
  };
  const double first = selected(16384), all = selected(32768);
  const double expected =
      (first * (256 + 256) + (all - first) * (512 + 64 + 512)) /
      (all * (256 + 256));
  const ClusterSpec h200 = *ClusterPreset("h200");
  const StepTime a = TimeOf(per_head, 1, Of(1, 1, 1, 1), h200);
  const StepTime b = TimeOf(latent, 1, Of(1, 1, 1, 1), h200);
  EXPECT_NEAR(b.slowest.attention / a.slowest.attention, expected, 1e-12);
  EXPECT_DOUBLE_EQ(b.slowest.gemm, a.slowest.gemm);
}

// One 32k sequence, every layer recomputed, its routed experts in two chunks
// of 16,384 tokens: each chunk's rows are formed once more in its backward,
// the experts' forward work again; in one piece they are not.
TEST(StepTimeTest, ExpertChunksRunTheExpertsForwardAgain) {
  PlanJob whole = Mini(Recompute::kFull);
  whole.precision = Precision::kFp32Bf16Copies;
  whole.seq_length = 32768;
  whole.global_batch_size = 1;
  whole.expert_chunk_tokens = 0;
  PlanJob chunked = whole;
  chunked.expert_chunk_tokens = 16384;
  const ClusterSpec h200 = *ClusterPreset("h200");
  const StepTime a = TimeOf(whole, 1, Of(1, 1, 1, 1), h200);
  const StepTime b = TimeOf(chunked, 1, Of(1, 1, 1, 1), h200);
  EXPECT_DOUBLE_EQ(b.slowest.experts, a.slowest.experts);
  // The experts' time is forward and backward, three forwards' work.
  EXPECT_NEAR(b.slowest.recompute - a.slowest.recompute, a.slowest.experts / 3,
              1e-9 * a.slowest.experts);
}

TEST(StepTimeTest, ComputeScalesWithTheDevicesRate) {
  ClusterSpec slow = *ClusterPreset("h200");
  ClusterSpec fast = slow;
  fast.device.matmul_flops *= 2;
  const StepTime a = TimeOf(Mini(), 8, Of(1, 2, 1, 4), slow);
  const StepTime b = TimeOf(Mini(), 8, Of(1, 2, 1, 4), fast);
  EXPECT_DOUBLE_EQ(a.slowest.gemm, 2 * b.slowest.gemm);
  EXPECT_DOUBLE_EQ(a.slowest.experts, 2 * b.slowest.experts);
  EXPECT_DOUBLE_EQ(a.slowest.attention, 2 * b.slowest.attention);
  EXPECT_DOUBLE_EQ(a.slowest.expert_parallel, b.slowest.expert_parallel);
}

TEST(StepTimeTest, BubbleShrinksWithVirtualStages) {
  const ClusterSpec h200 = *ClusterPreset("h200");
  const StepTime plain = TimeOf(Mini(), 8, Of(1, 4, 1, 2), h200);
  EXPECT_DOUBLE_EQ(plain.bubble, 3 * plain.slowest.Total());
  const StepTime interleaved = TimeOf(Mini(), 8, Of(1, 4, 1, 2, 2), h200);
  EXPECT_DOUBLE_EQ(interleaved.bubble, 1.5 * interleaved.slowest.Total());
  EXPECT_EQ(plain.micro_batches, 32);
}

TEST(StepTimeTest, CollectivesFollowTheLinksTheyCross) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  const StepTime one = TimeOf(Mini(), 8, Of(1, 1, 1, 1), h100);
  EXPECT_EQ(one.slowest.expert_parallel, 0);
  EXPECT_EQ(one.slowest.tensor_parallel, 0);
  EXPECT_EQ(one.slowest.context_parallel, 0);
  // The same routed rows per rank: EP8 inside a node, EP16 over two.
  const StepTime inside = TimeOf(Mini(), 16, Of(1, 1, 1, 8), h100);
  const StepTime across = TimeOf(Mini(), 16, Of(1, 1, 1, 16), h100);
  EXPECT_GT(across.slowest.expert_parallel, 3 * inside.slowest.expert_parallel);
  EXPECT_GT(TimeOf(Mini(), 8, Of(2, 1, 1, 1), h100).slowest.tensor_parallel, 0);
  EXPECT_GT(TimeOf(Mini(), 8, Of(1, 1, 2, 1), h100).slowest.context_parallel,
            0);
}

// This trainer's overlapped sums hide data parallelism's all-reduce behind
// the last backward, all but the embedding's; other splits keep theirs, and
// ZeRO-1 its gather.
TEST(StepTimeTest, OverlappedSumsHideTheAllReduceBehindTheLastBackward) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  PlanJob plain = Mini();
  plain.precision = Precision::kFp32Bf16Copies;
  plain.distributed_optimizer = false;
  PlanJob overlapped = plain;
  overlapped.overlap_grad_reduce = true;
  ASSERT_TRUE(ValidatePlanJob(overlapped).ok());
  const StepTime after = TimeOf(plain, 16, Of(1, 1, 1, 1), h100);
  const StepTime during = TimeOf(overlapped, 16, Of(1, 1, 1, 1), h100);
  EXPECT_GT(after.data_parallel, 0);
  EXPECT_LT(during.data_parallel, after.data_parallel);
  EXPECT_GT(during.data_parallel, 0);  // the embedding's sum
  EXPECT_EQ(TimeOf(overlapped, 16, Of(1, 1, 1, 2), h100).data_parallel,
            TimeOf(plain, 16, Of(1, 1, 1, 2), h100).data_parallel);
  // ZeRO-1's gather of the updated shards stays exposed.
  PlanJob zero1 = overlapped;
  zero1.distributed_optimizer = true;
  EXPECT_GT(TimeOf(zero1, 16, Of(1, 1, 1, 1), h100).data_parallel,
            during.data_parallel);
  overlapped.precision = Precision::kBf16Mixed;
  EXPECT_NE(ValidatePlanJob(overlapped).message().find("--overlap-grad-reduce"),
            std::string::npos);
}

TEST(StepTimeTest, RecomputationCostsForwardWork) {
  const ClusterSpec h200 = *ClusterPreset("h200");
  const StepTime none = TimeOf(Mini(), 8, Of(1, 2, 1, 4), h200);
  const StepTime selective =
      TimeOf(Mini(Recompute::kSelective), 8, Of(1, 2, 1, 4), h200);
  const StepTime full = TimeOf(Mini(Recompute::kFull), 8, Of(1, 2, 1, 4), h200);
  EXPECT_EQ(none.slowest.recompute, 0);
  EXPECT_GT(selective.slowest.recompute, 0);
  EXPECT_LT(selective.slowest.recompute, full.slowest.recompute);
  // A full forward again: a third of forward + backward of the GEMMs.
  EXPECT_GT(full.slowest.recompute, full.slowest.gemm / 3);
}

}  // namespace
}  // namespace glm
