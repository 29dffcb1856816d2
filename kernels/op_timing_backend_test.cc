#include "kernels/op_timing_backend.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

std::vector<float> Ramp(int64_t n, float step) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = step * static_cast<float>(i % 7) - 0.3f;
  return values;
}

// The cells of the report row whose first cell is `name`, trimmed.
std::vector<std::string> RowCells(const std::string& report,
                                  const std::string& name) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 3) continue;
    cells = std::vector<std::string>(cells.begin() + 1, cells.end() - 1);
    for (std::string& cell : cells) {
      cell = std::string(absl::StripAsciiWhitespace(cell));
    }
    if (cells[0] == name) return cells;
  }
  return {};
}

// The timed backend computes what the backend it wraps computes, and its
// report names each op group with its calls, its first call apart from the
// later ones and, for matrix products, a rate.
TEST(OpTimingBackendTest, ComputesTheSameAndReportsEachGroup) {
  const std::vector<float> x = Ramp(4 * 3, 0.25f), w = Ramp(5 * 3, 0.5f);
  const std::vector<int32_t> targets = {1, 0, -1, 4};
  std::vector<float> plain(4 * 5), timed_out(4 * 5);
  CpuBackend cpu;
  cpu.Linear({x.data(), 4, 3, 3}, {w.data(), 5, 3, 3}, {plain.data(), 4, 5, 5},
             false);
  // Both sums start from the same value: the ops add to them.
  double plain_loss = 0.5, timed_loss = 0.5;
  cpu.CrossEntropyForward({plain.data(), 4, 5, 5}, targets.data(), 3.0,
                          &plain_loss);

  std::ostringstream report;
  {
    OpTimingBackend timed(std::make_unique<CpuBackend>(), &report);
    EXPECT_EQ(timed.Name(), "cpu");
    EXPECT_EQ(timed.allocator(), nullptr);
    for (int i = 0; i < 2; ++i) {
      timed.Linear({x.data(), 4, 3, 3}, {w.data(), 5, 3, 3},
                   {timed_out.data(), 4, 5, 5}, false);
    }
    timed.CrossEntropyForward({timed_out.data(), 4, 5, 5}, targets.data(), 3.0,
                              &timed_loss);
    EXPECT_TRUE(report.str().empty()) << "reports only when destroyed";
  }
  EXPECT_EQ(plain, timed_out);
  EXPECT_EQ(plain_loss, timed_loss);
  EXPECT_GT(plain_loss, 0.5);
  const std::string text = report.str();
  EXPECT_NE(text.find("| Linear w[5,3] | 2 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| CrossEntropyForward | 1 |"), std::string::npos)
      << text;
  EXPECT_NE(text.find("| outside ops |"), std::string::npos) << text;
  // The first call is shown apart from the later ones' mean.
  EXPECT_NE(text.find("| first call ms | ms per later call |"),
            std::string::npos)
      << text;
  // Products get a FLOP rate, memory-bound ops a byte rate, neither both.
  EXPECT_NE(text.find("| TFLOP/s | GB/s |"), std::string::npos) << text;
  const std::vector<std::string> linear = RowCells(text, "Linear w[5,3]"),
                                 loss = RowCells(text, "CrossEntropyForward");
  ASSERT_EQ(linear.size(), 8u) << text;
  ASSERT_EQ(loss.size(), 8u) << text;
  EXPECT_NE(linear[6], "");
  EXPECT_EQ(linear[7], "");
  EXPECT_EQ(loss[6], "");
  EXPECT_NE(loss[7], "");
}

// Records the weight ops the wrapper hands on.
class RecordingBackend : public CpuBackend {
 public:
  explicit RecordingBackend(std::vector<std::string>* calls) : calls_(calls) {}
  void RefreshComputeCopies(const std::vector<ConstFloatSpan>&) override {
    calls_->push_back("RefreshComputeCopies");
  }
  void AdamWStep(const AdamWHyperparameters& hyper,
                 const std::vector<AdamWTensor>& tensors) override {
    calls_->push_back("AdamWStep");
    CpuBackend::AdamWStep(hyper, tensors);
  }

 private:
  std::vector<std::string>* calls_;
};

// The optimizer step reaches the wrapped backend, which keeps its compute
// copies current in it (Backend::AdamWStep).
TEST(OpTimingBackendTest, HandsOnTheOptimizerStepAndTheRefresh) {
  std::vector<float> w = {1.f, -2.f}, g = {0.5f, 0.25f}, m(2), v(2);
  std::vector<float> expected = w, expected_m(2), expected_v(2);
  AdamWHyperparameters hyper;
  hyper.lr = 0.1;
  CpuBackend().AdamWStep(hyper, {{expected.data(), g.data(), expected_m.data(),
                                  expected_v.data(), 2, true}});
  std::vector<std::string> calls;
  std::ostringstream report;
  {
    OpTimingBackend timed(std::make_unique<RecordingBackend>(&calls), &report);
    timed.RefreshComputeCopies({{w.data(), 2}});
    timed.AdamWStep(hyper, {{w.data(), g.data(), m.data(), v.data(), 2, true}});
  }
  EXPECT_EQ(calls,
            (std::vector<std::string>{"RefreshComputeCopies", "AdamWStep"}));
  EXPECT_EQ(w, expected);
}

}  // namespace
}  // namespace glm
