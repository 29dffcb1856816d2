// The planner's peak memory of CPU ranks against real training runs:
// planner/cpu_memory_runs.sh ran glm-worker processes under DP, ZeRO-1, PP,
// VPP, EP, TP, CP and combinations and recorded each rank's peak resident
// memory, once with glibc's default malloc and once with its mmap threshold
// fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_). By default glibc raises the
// threshold to the largest block freed, so later activation blocks come
// from a heap that keeps what is freed: memory the trainer no longer uses,
// which the planner does not model. With the threshold fixed every
// prediction (this trainer's fp32 store, the "cpu" preset) is within 10% of
// the measured peak; with glibc's default within 15%.
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "planner/evaluation.h"

namespace glm {
namespace {

struct Measured {
  std::string name, model, layout;
  int world, tp, pp, vpp, cp, ep, zero1, rank;
  double peak_mib;
};

std::vector<Measured> ReadRuns(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<Measured> runs;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Measured m;
    fields >> m.name >> m.world >> m.tp >> m.pp >> m.vpp >> m.cp >> m.ep >>
        m.zero1 >> m.model >> m.layout >> m.rank >> m.peak_mib;
    EXPECT_FALSE(fields.fail()) << line;
    runs.push_back(m);
  }
  return runs;
}

PlanJob JobOf(const Measured& m) {
  PlanJob job;
  job.model = m.model == "tiny"
                  ? *PresetConfig("glm5.2-tiny")
                  : *ReadHfConfigFile("planner/testdata/cpu_bench_config.json");
  job.precision = Precision::kFp32;
  job.device = RankDevice::kCpu;
  job.seq_length = 512;
  job.global_batch_size = 8;
  job.micro_batch_size = 2;
  job.distributed_optimizer = m.zero1 != 0;
  return job;
}

// Every run of `file` predicted within `tolerance` of its measured peak.
void CheckRuns(const std::string& file, double tolerance) {
  const std::vector<Measured> runs = ReadRuns(file);
  const ClusterSpec cpu = *ClusterPreset("cpu");
  std::set<std::string> splits;
  for (const Measured& m : runs) {
    Split split;
    split.tp = m.tp;
    split.pp = m.pp;
    split.vpp = m.vpp;
    split.cp = m.cp;
    split.ep = m.ep;
    if (m.layout != "-") split.layout = m.layout;
    const PlanJob job = JobOf(m);
    absl::StatusOr<SplitPlan> plan = PlanSplit(job, m.world, split);
    ASSERT_TRUE(plan.ok()) << m.name << ": " << plan.status();
    absl::StatusOr<Evaluation> e =
        Evaluate(job, *plan, cpu, KernelRates(), /*with_time=*/false);
    ASSERT_TRUE(e.ok()) << e.status();
    const double predicted =
        e->memory[plan->grid.ranks[m.rank].pp].Peak() / (1024.0 * 1024.0);
    std::cout << absl::StrFormat(
        "%-14s rank %d: measured %5.0f MiB, "
        "predicted %6.1f MiB (%+.1f%%)\n",
        m.name, m.rank, m.peak_mib, predicted,
        100 * (predicted / m.peak_mib - 1));
    EXPECT_NEAR(predicted, m.peak_mib, tolerance * m.peak_mib)
        << file << ": " << m.name << " rank " << m.rank;
    splits.insert(m.name);
  }
  // Every kind of split was measured.
  for (const char* name : {"dp2", "dp2_zero1", "pp2", "pp2_vpp2", "ep2", "tp2",
                           "cp2", "pp2_dp2", "tp2_cp2"}) {
    EXPECT_EQ(splits.count(name), 1u) << file << ": " << name;
  }
}

TEST(CpuMemoryTest, WithinTenPercentOfMeasuredRanks) {
  CheckRuns("planner/testdata/cpu_memory_runs_fixed_mmap.txt", 0.10);
}

TEST(CpuMemoryTest, WithinFifteenPercentUnderGlibcDefaults) {
  CheckRuns("planner/testdata/cpu_memory_runs.txt", 0.15);
}

}  // namespace
}  // namespace glm
