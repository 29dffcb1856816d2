#include "kernels/cuda/activity_window.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace glm::cuda {
namespace {

constexpr ActivityKind kKernel = ActivityKind::kKernel;
constexpr ActivityKind kCopy = ActivityKind::kCopy;
constexpr ActivityKind kMemset = ActivityKind::kMemset;

void ExpectGaps(const ActivityWindow& window,
                const std::vector<IdleGap>& expected) {
  ASSERT_EQ(window.largest_gaps.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(window.largest_gaps[i].offset, expected[i].offset) << "gap " << i;
    EXPECT_EQ(window.largest_gaps[i].length, expected[i].length) << "gap " << i;
  }
}

// Two kernels that overlap count once: [110, 150) and [160, 170) are busy.
TEST(ActivityWindowTest, OverlappingIntervalsCountOnce) {
  const std::vector<ActivityInterval> work = {
      {110, 130, kKernel}, {120, 150, kKernel}, {160, 170, kKernel}};
  const ActivityWindow window = SummarizeWindow(work, 100, 200);
  EXPECT_EQ(window.window, 100u);
  EXPECT_EQ(window.busy, 50u);
  EXPECT_EQ(window.idle, 50u);
  EXPECT_DOUBLE_EQ(window.busy_share(), 0.5);
  EXPECT_DOUBLE_EQ(window.idle_share(), 0.5);
  EXPECT_EQ(window.gaps, 3);  // before, between and after
  ExpectGaps(window, {{70, 30}, {0, 10}, {50, 10}});
  EXPECT_EQ(window.kernels, 3);
  EXPECT_EQ(window.busy_after_end, 0u);
  // All three gaps are under 10 us.
  EXPECT_EQ(window.idle_by_gap_length[0], 50u);
  EXPECT_EQ(window.idle_by_gap_length[3], 0u);
}

// Disjoint work of each kind filling a 2 ms window but for a 5 us, a 50 us and
// a 500 us gap: each gap's idle time lands in its length class.
TEST(ActivityWindowTest, DisjointIntervalsAndGapClasses) {
  std::vector<ActivityInterval> work = {
      {1'000'000, 1'500'000, kKernel},
      {1'505'000, 1'900'000, kCopy},
      {1'950'000, 2'000'000, kMemset},
      {2'500'000, 3'000'000, kKernel},
  };
  const ActivityWindow window = SummarizeWindow(work, 1'000'000, 3'000'000);
  EXPECT_EQ(window.busy, 1'445'000u);
  EXPECT_EQ(window.idle, 555'000u);
  EXPECT_DOUBLE_EQ(window.busy_share(), 0.7225);
  EXPECT_EQ(window.gaps, 3);  // none before the first or after the last
  ExpectGaps(window,
             {{1'000'000, 500'000}, {900'000, 50'000}, {500'000, 5'000}});
  EXPECT_EQ(window.idle_by_gap_length[0], 5'000u);
  EXPECT_EQ(window.idle_by_gap_length[1], 50'000u);
  EXPECT_EQ(window.idle_by_gap_length[2], 500'000u);
  EXPECT_EQ(window.idle_by_gap_length[3], 0u);
  EXPECT_EQ(window.kernels, 2);
  EXPECT_EQ(window.copies, 1);
  EXPECT_EQ(window.memsets, 1);

  // The order of the records does not matter.
  std::reverse(work.begin(), work.end());
  const ActivityWindow reversed = SummarizeWindow(work, 1'000'000, 3'000'000);
  EXPECT_EQ(reversed.busy, window.busy);
  EXPECT_EQ(reversed.gaps, window.gaps);
  ExpectGaps(reversed,
             {{1'000'000, 500'000}, {900'000, 50'000}, {500'000, 5'000}});

  EXPECT_EQ(FormatActivityWindow(window),
            "window (ms): 2.0 | busy: 72.25% | idle (ms): 0.555 | "
            "launch-gap share: 27.75% in 3 gaps | largest gaps (ms at ms): "
            "0.500 at 1.000, 0.050 at 0.900, 0.005 at 0.500 | idle by gap "
            "<10us/<100us/<1ms/>=1ms (ms): 0.005/0.050/0.500/0.000 | kernels: "
            "2 | copies: 1 | memsets: 1 | busy after end (ms): 0.000 | "
            "untimed: 0 | dropped: 0");
}

// Work inside other work adds nothing; equal gaps list the earlier first.
TEST(ActivityWindowTest, NestedIntervals) {
  const std::vector<ActivityInterval> work = {{1250, 1260, kKernel},
                                              {1100, 1900, kKernel},
                                              {1200, 1300, kCopy},
                                              {1300, 1400, kKernel}};
  const ActivityWindow window = SummarizeWindow(work, 1000, 2000);
  EXPECT_EQ(window.busy, 800u);
  EXPECT_EQ(window.idle, 200u);
  EXPECT_EQ(window.gaps, 2);
  ExpectGaps(window, {{0, 100}, {900, 100}});
  EXPECT_EQ(window.kernels, 3);
  EXPECT_EQ(window.copies, 1);
}

// Work reaching over the window's edges counts only inside it; work past its
// end is summed apart; work wholly outside is not counted.
TEST(ActivityWindowTest, IntervalsClippedByTheWindow) {
  const std::vector<ActivityInterval> work = {
      {500, 1200, kKernel},   // starts before the window
      {1800, 2500, kKernel},  // ends after it
      {100, 900, kKernel},    // wholly before
      {2100, 2300, kCopy},    // wholly after
      {1500, 1500, kMemset},  // zero length, inside
      {2000, 2000, kMemset},  // zero length, at the end: outside
  };
  const ActivityWindow window = SummarizeWindow(work, 1000, 2000);
  EXPECT_EQ(window.busy, 400u);
  EXPECT_EQ(window.idle, 600u);
  EXPECT_EQ(window.gaps, 1);
  ExpectGaps(window, {{200, 600}});
  EXPECT_EQ(window.kernels, 2);
  EXPECT_EQ(window.copies, 0);
  EXPECT_EQ(window.memsets, 1);
  EXPECT_EQ(window.busy_after_end, 500u);  // [2000, 2500), the copy inside it
}

TEST(ActivityWindowTest, UntimedRecordsAreLeftOut) {
  const std::vector<ActivityInterval> work = {
      {0, 0, kKernel}, {1600, 1500, kKernel}, {1200, 1300, kKernel}};
  const ActivityWindow window = SummarizeWindow(work, 1000, 2000);
  EXPECT_EQ(window.untimed, 2);
  EXPECT_EQ(window.kernels, 1);
  EXPECT_EQ(window.busy, 100u);
}

TEST(ActivityWindowTest, IdleAndEmptyWindows) {
  const ActivityWindow idle = SummarizeWindow({}, 1000, 3000);
  EXPECT_EQ(idle.busy, 0u);
  EXPECT_EQ(idle.idle, 2000u);
  EXPECT_DOUBLE_EQ(idle.idle_share(), 1.0);
  EXPECT_EQ(idle.gaps, 1);
  ExpectGaps(idle, {{0, 2000}});

  const ActivityWindow empty =
      SummarizeWindow({{1000, 2000, kKernel}}, 3000, 3000);
  EXPECT_EQ(empty.window, 0u);
  EXPECT_EQ(empty.busy, 0u);
  EXPECT_EQ(empty.gaps, 0);
  EXPECT_DOUBLE_EQ(empty.busy_share(), 0.0);
  EXPECT_DOUBLE_EQ(empty.idle_share(), 0.0);
  EXPECT_EQ(empty.kernels, 0);
}

TEST(ActivityWindowTest, KeepsAsManyGapsAsAsked) {
  const std::vector<ActivityInterval> work = {
      {110, 120, kKernel}, {140, 150, kKernel}, {190, 195, kKernel}};
  const ActivityWindow one = SummarizeWindow(work, 100, 200, /*largest=*/1);
  EXPECT_EQ(one.gaps, 4);
  ExpectGaps(one, {{50, 40}});
  const ActivityWindow none = SummarizeWindow(work, 100, 200, /*largest=*/0);
  EXPECT_EQ(none.gaps, 4);
  EXPECT_TRUE(none.largest_gaps.empty());
  EXPECT_NE(FormatActivityWindow(none).find("largest gaps (ms at ms): - |"),
            std::string::npos);
}

// Kernel times per name: the longest total first, clipped to the window, a
// kernel counted once per call, copies and unnamed kernels left out; the
// table cuts names at their parameters and sums the rows past `top`.
TEST(ActivityWindowTest, KernelTimesByName) {
  const std::vector<ActivityInterval> work = {
      {1'000, 3'000, kKernel, "void glm::Gemm<4>(float*, int)"},
      {3'000, 4'000, kKernel, "Norm"},
      {4'000, 7'000, kKernel, "void glm::Gemm<4>(float*, int)"},
      {7'000, 7'500, kCopy},
      {7'500, 8'000, kKernel},
      {9'000, 11'000, kKernel, "Norm"},  // 1 us inside the window
  };
  const ActivityWindow window = SummarizeWindow(work, 0, 10'000);
  ASSERT_EQ(window.kernel_times.size(), 2u);
  EXPECT_EQ(window.kernel_times[0].name, "void glm::Gemm<4>(float*, int)");
  EXPECT_EQ(window.kernel_times[0].calls, 2);
  EXPECT_EQ(window.kernel_times[0].total, 5'000u);
  EXPECT_EQ(window.kernel_times[1].name, "Norm");
  EXPECT_EQ(window.kernel_times[1].calls, 2);
  EXPECT_EQ(window.kernel_times[1].total, 2'000u);
  EXPECT_EQ(window.busy, 8'000u);

  const std::string table = FormatKernelTimes(window, /*top=*/1);
  EXPECT_NE(table.find("| void glm::Gemm<4> | 2 | 0.01 | 2.5 | 62.5% |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 1 other kernels | 2 | 0.00 | | 25.0% |"),
            std::string::npos)
      << table;
}

// Kernels by the op span each starts in: a kernel that runs past its op's
// end stays that op's; one starting between spans, or with no spans at all,
// is none's; rows sum per (op, kernel), the longest first.
TEST(ActivityWindowTest, KernelsByOpSpan) {
  const std::vector<ActivityInterval> work = {
      {1'000, 2'000, kKernel, "Gemm(float*)"},
      {2'000, 2'500, kKernel, "Norm"},
      {5'000, 9'000, kKernel, "Gemm(float*)"},  // starts in Linear's 2nd span
      {9'500, 9'700, kKernel, "Norm"},          // between spans
      {9'700, 9'800, kMemset},
  };
  const std::vector<OpSpan> ops = {
      {4'500, 8'000, "Linear"},  // any order
      {500, 2'100, "Linear"},
      {2'100, 3'000, "RmsNorm"},
  };
  const ActivityWindow window = SummarizeWindow(work, 0, 10'000, 3, ops);
  ASSERT_EQ(window.kernels_by_op.size(), 3u);
  EXPECT_EQ(window.kernels_by_op[0].op, "Linear");
  EXPECT_EQ(window.kernels_by_op[0].kernel, "Gemm(float*)");
  EXPECT_EQ(window.kernels_by_op[0].calls, 2);
  EXPECT_EQ(window.kernels_by_op[0].total, 5'000u);
  // Norm at 2,000 started inside Linear's first span, which ends at 2,100.
  EXPECT_EQ(window.kernels_by_op[1].op, "Linear");
  EXPECT_EQ(window.kernels_by_op[1].kernel, "Norm");
  EXPECT_EQ(window.kernels_by_op[1].total, 500u);
  EXPECT_EQ(window.kernels_by_op[2].op, kOutsideOps);
  EXPECT_EQ(window.kernels_by_op[2].total, 200u);

  const std::string table = FormatKernelsByOp(window, /*top=*/2);
  EXPECT_NE(table.find("| Linear | Gemm | 2 | 0.01 | 2.5 | "),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 1 other rows | | 1 | 0.00 | | "), std::string::npos)
      << table;
  EXPECT_TRUE(SummarizeWindow(work, 0, 10'000).kernels_by_op.empty());
}

}  // namespace
}  // namespace glm::cuda
