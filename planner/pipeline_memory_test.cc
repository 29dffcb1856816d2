#include "planner/pipeline_memory.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(PipelineMemoryTest, OneForwardOneBackwardKeepsPpMinusRankInFlight) {
  const std::vector<ChunkMemory> chunk = {{100, 10, 0, 0}};
  for (int rank = 0; rank < 4; ++rank) {
    absl::StatusOr<SchedulePeak> peak = PipelineSchedulePeak(4, rank, chunk, 8);
    ASSERT_TRUE(peak.ok());
    EXPECT_EQ(peak->in_flight, 4 - rank);
    EXPECT_EQ(peak->activations, 100 * (4 - rank));
    EXPECT_EQ(peak->transient, 10);
  }
  // Fewer micro batches than stages: all of them.
  EXPECT_EQ(PipelineSchedulePeak(4, 0, chunk, 2)->in_flight, 2);
}

TEST(PipelineMemoryTest, InterleavedWarmUpHoldsMore) {
  // Megatron's interleaved warm-up: (pp - rank - 1) * 2 + (V - 1) * pp
  // forwards, then one more before the first backward.
  const std::vector<ChunkMemory> chunks = {{100, 0, 0, 0}, {100, 0, 0, 0}};
  EXPECT_EQ(PipelineSchedulePeak(4, 0, chunks, 8)->in_flight, 6 + 4 + 1);
  EXPECT_EQ(PipelineSchedulePeak(4, 3, chunks, 8)->in_flight, 0 + 4 + 1);
}

TEST(PipelineMemoryTest, HeldSendsGrowUntilTheStepEnds) {
  // A middle stage sends its output after each forward and its input
  // gradient after each backward; the peak is the last backward, before its
  // own send.
  const std::vector<ChunkMemory> chunk = {{100, 0, 7, 5}};
  absl::StatusOr<SchedulePeak> peak = PipelineSchedulePeak(2, 1, chunk, 4);
  ASSERT_TRUE(peak.ok());
  EXPECT_EQ(peak->in_flight, 1);
  EXPECT_EQ(peak->sent, 4 * 7 + 3 * 5);
}

}  // namespace
}  // namespace glm
