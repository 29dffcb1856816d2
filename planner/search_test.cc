#include "planner/search.h"

#include "gtest/gtest.h"
#include "planner/activation_memory.h"

namespace glm {
namespace {

PlanJob Mini() {
  PlanJob job;
  job.model = *PresetConfig("glm5.2-mini");
  job.seq_length = 4096;
  job.global_batch_size = 64;
  return job;
}

SearchOptions Small() {
  SearchOptions options;
  options.max_vpp = 2;
  options.max_etp = 2;
  options.keep = 4;
  return options;
}

TEST(SearchTest, ReturnsTheFastestFittingSplits) {
  const ClusterSpec h200 = *ClusterPreset("h200");
  absl::StatusOr<SearchResult> result =
      SearchSplits(Mini(), 8, h200, KernelRates(), Small());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->best.size(), 4u);
  EXPECT_GE(result->candidates,
            static_cast<int>(result->fitting_seconds.size()));
  for (size_t i = 0; i < result->best.size(); ++i) {
    EXPECT_TRUE(result->best[i].Fits(h200.device));
    EXPECT_DOUBLE_EQ(result->best[i].time.Total(), result->fitting_seconds[i]);
  }
  // Nothing the search saw is faster than its first.
  EXPECT_EQ(RankAmong(*result, result->best[0].time.Total()), 1);
  EXPECT_EQ(RankAmong(*result, result->fitting_seconds.back() + 1),
            static_cast<int>(result->fitting_seconds.size()) + 1);
}

TEST(SearchTest, DropsWhatDoesNotFit) {
  ClusterSpec small = *ClusterPreset("h200");
  small.device.memory_bytes = int64_t{24} << 30;
  absl::StatusOr<SearchResult> result =
      SearchSplits(Mini(), 8, small, KernelRates(), Small());
  ASSERT_TRUE(result.ok());
  for (const Evaluation& e : result->best) {
    EXPECT_LE(e.PeakBytes(), small.device.memory_bytes);
  }
  small.device.memory_bytes = int64_t{2} << 30;
  EXPECT_TRUE(
      SearchSplits(Mini(), 8, small, KernelRates(), Small())->best.empty());
}

// This trainer recomputes whole layers, and only as one model per rank
// without expert parallelism; never selectively.
TEST(SearchTest, ThisTrainerIsSearchedWithItsOwnRecomputation) {
  PlanJob job = Mini();
  job.model = *PresetConfig("glm5.2-tiny");
  job.precision = Precision::kFp32;
  job.device = RankDevice::kCpu;
  job.seq_length = 256;
  job.global_batch_size = 8;
  absl::StatusOr<SearchResult> result =
      SearchSplits(job, 4, *ClusterPreset("cpu"), KernelRates(), Small());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->best.empty());
  for (const Evaluation& e : result->best) {
    EXPECT_NE(e.job.recompute, Recompute::kSelective);
    if (e.job.recompute == Recompute::kFull) {
      EXPECT_TRUE(RunsAsOneModel(e.plan.split) && e.plan.split.ep == 1);
    }
  }
}

// This trainer's CUDA bf16 mode: its fp32 store and recomputation rules, plus
// the bf16 copies of the product weights, and activations of the activation
// type in bf16.
TEST(SearchTest, TheCudaBf16ModeIsTheFp32StorePlusWeightCopies) {
  PlanJob fp32 = Mini();
  fp32.precision = Precision::kFp32;
  fp32.global_batch_size = 8;
  PlanJob copies = fp32;
  copies.precision = Precision::kFp32Bf16Copies;
  const ClusterSpec h200 = *ClusterPreset("h200");
  absl::StatusOr<SplitPlan> plan = PlanSplit(fp32, 1, Split());
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Evaluation> a = Evaluate(fp32, *plan, h200, KernelRates());
  absl::StatusOr<Evaluation> b = Evaluate(copies, *plan, h200, KernelRates());
  ASSERT_TRUE(a.ok() && b.ok());
  const RankMemory& x = a->memory[0];
  const RankMemory& y = b->memory[0];
  EXPECT_EQ(x.state.copies, 0);
  // Every held tensor of two or more dimensions but the embedding: about
  // half the fp32 weights' bytes.
  EXPECT_GT(y.state.copies, x.state.weights * 2 / 5);
  EXPECT_LT(y.state.copies, x.state.weights / 2);
  EXPECT_EQ(y.state.Total() - x.state.Total(), y.state.copies);
  EXPECT_LT(y.Activations(), x.Activations());

  copies.model = *PresetConfig("glm5.2-tiny");
  copies.seq_length = 256;
  absl::StatusOr<SearchResult> result =
      SearchSplits(copies, 4, h200, KernelRates(), Small());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->best.empty());
  for (const Evaluation& e : result->best) {
    EXPECT_NE(e.job.recompute, Recompute::kSelective);
    EXPECT_GT(e.Busiest().state.copies, 0);
  }
}

}  // namespace
}  // namespace glm
