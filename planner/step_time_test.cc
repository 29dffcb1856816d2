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
                const ClusterSpec& cluster,
                const KernelRates& rates = KernelRates()) {
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Evaluation> e = Evaluate(job, *plan, cluster, rates);
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

// One sequence a step, every layer recomputed, in the CUDA bf16 mode: the
// long-context bench's job (bench/gpu_long_context_bench.sh).
PlanJob LongSequence(int64_t seq_length, int64_t latent_attention_from) {
  PlanJob job = Mini(Recompute::kFull);
  job.precision = Precision::kFp32Bf16Copies;
  job.model.num_mtp_layers = 0;
  job.seq_length = seq_length;
  job.global_batch_size = 1;
  job.latent_attention_from = latent_attention_from;
  return job;
}

MicroBatchTime LongSequenceTime(int64_t seq_length,
                                int64_t latent_attention_from,
                                const KernelRates& rates = KernelRates()) {
  return TimeOf(LongSequence(seq_length, latent_attention_from), 1,
                Of(1, 1, 1, 1), *ClusterPreset("h200"), rates)
      .slowest;
}

double CausalPairs(double queries) { return queries * (queries + 1) / 2; }

// Every query per head: cuDNN's attention over every causal key, its cost
// the causal pairs (8k and 16k each in one call of 2^28 pairs).
TEST(StepTimeTest, PerHeadAttentionFollowsTheCausalPairs) {
  const MicroBatchTime a = LongSequenceTime(8192, 0);
  const MicroBatchTime b = LongSequenceTime(16384, 0);
  EXPECT_NEAR(b.attention / a.attention, CausalPairs(16384) / CausalPairs(8192),
              1e-9);
}

// Queries from the 16,384th on read their top-k latent rows, a cost a query
// that does not grow with the length: 32k and 64k add the same per query
// over 16k, whose queries are all per head.
TEST(StepTimeTest, LatentAttentionCostsTheSameAQueryAtAnyLength) {
  const double per_head = LongSequenceTime(16384, 16384).attention;
  const double at_32k = LongSequenceTime(32768, 16384).attention;
  const double at_64k = LongSequenceTime(65536, 16384).attention;
  EXPECT_NEAR((at_64k - per_head) / 49152, (at_32k - per_head) / 16384,
              1e-9 * at_64k / 49152);
  // Far below the per-head form's cost over the same queries.
  EXPECT_LT(at_64k, 0.5 * LongSequenceTime(65536, 0).attention);
}

// Backward calls after the first cover every key up to their last query:
// 16k in two calls of 8,192 queries computes the second's whole 8,192 x
// 16,384 rectangle where one call computes its causal half. At the one-call
// rate (forward one third of the attention, backward two) that is the
// extra pairs at the backward's cost a pair.
TEST(StepTimeTest, LaterAttentionCallsCoverTheirRectangle) {
  KernelRates rates;
  rates.per_head_attention_later_calls = rates.per_head_attention;
  PlanJob one_call = LongSequence(16384, 0);
  PlanJob two_calls = one_call;
  two_calls.attention_pairs_per_call = int64_t{1} << 27;
  const ClusterSpec h200 = *ClusterPreset("h200");
  const double one =
      TimeOf(one_call, 1, Of(1, 1, 1, 1), h200, rates).slowest.attention;
  const double two =
      TimeOf(two_calls, 1, Of(1, 1, 1, 1), h200, rates).slowest.attention;
  const double extra_pairs =
      CausalPairs(8192) + 8192.0 * 16384 - CausalPairs(16384);
  EXPECT_NEAR(two - one, 2.0 / 3 * one / CausalPairs(16384) * extra_pairs,
              1e-9 * one);
  // At the measured rate of the later calls they cost more still.
  EXPECT_GT(TimeOf(two_calls, 1, Of(1, 1, 1, 1), h200).slowest.attention, two);
}

// The indexer scores every causal key; its KL loss too up to 8 x top-k keys
// (16,384 here), past that only each query's selected keys.
TEST(StepTimeTest, IndexerScoresAreQuadraticAndItsLossTurnsSparse) {
  const MicroBatchTime at_8k = LongSequenceTime(8192, 16384);
  const MicroBatchTime at_16k = LongSequenceTime(16384, 16384);
  const MicroBatchTime at_32k = LongSequenceTime(32768, 16384);
  const MicroBatchTime at_64k = LongSequenceTime(65536, 16384);
  const double quadratic = CausalPairs(16384) / CausalPairs(8192);
  EXPECT_NEAR(at_16k.indexer / at_8k.indexer, quadratic, 1e-9);
  EXPECT_NEAR(at_64k.indexer / at_32k.indexer,
              CausalPairs(65536) / CausalPairs(32768), 1e-9);
  EXPECT_NEAR(at_16k.indexer_loss / at_8k.indexer_loss, quadratic, 1e-9);
  // Selected keys: 2,048 a query past the first 2,048.
  auto selected = [](double n) {
    return CausalPairs(2048) + (n - 2048) * 2048;
  };
  EXPECT_NEAR(at_64k.indexer_loss / at_32k.indexer_loss,
              selected(65536) / selected(32768), 1e-9);
  EXPECT_LT(at_32k.indexer_loss, 4 * at_16k.indexer_loss);
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
