// Prints the planner's predictions for every seed run next to what the run
// reported, and what the planner recommends for the same job and cluster
// size (the tables of planner/NOTES.md):  seed_comparison
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "planner/evaluation.h"
#include "planner/search.h"
#include "planner/seed_runs.h"

namespace glm {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::optional<Evaluation> EvaluateWith(const SeedRun& run,
                                       Recompute recompute) {
  PlanJob job = run.job;
  job.recompute = recompute;
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, run.world, run.split);
  if (!plan.ok()) return std::nullopt;
  absl::StatusOr<Evaluation> e =
      Evaluate(job, *plan, run.cluster, KernelRates());
  if (!e.ok()) return std::nullopt;
  return *e;
}

// The stated recomputation, else the least that fits the device.
std::optional<Evaluation> AsRun(const SeedRun& run) {
  if (run.recompute_stated) return EvaluateWith(run, run.job.recompute);
  for (Recompute r :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    std::optional<Evaluation> e = EvaluateWith(run, r);
    if (e && e->Fits(run.cluster.device)) return e;
  }
  return EvaluateWith(run, Recompute::kFull);
}

void MemoryTable(const std::vector<SeedRun>& runs) {
  absl::PrintF(
      "| run | split | peak, none | peak, selective | peak, full | device | "
      "reported |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const SeedRun& run : runs) {
    std::string cells;
    std::string split;
    for (Recompute r :
         {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      std::optional<Evaluation> e = EvaluateWith(run, r);
      if (!e) {
        cells += " - |";
        continue;
      }
      split = SplitName(e->plan);
      cells += absl::StrFormat(" %.0f%s |", e->PeakBytes() / kMiB,
                               e->Fits(run.cluster.device) ? "" : " (no)");
    }
    absl::PrintF(
        "| %s | %s |%s %.0f | %s |\n", run.name, split, cells,
        run.cluster.device.memory_bytes / kMiB,
        run.peak_mib > 0 ? absl::StrFormat("%.0f", run.peak_mib) : "not given");
  }
}

void TimeTable(const std::vector<SeedRun>& runs) {
  absl::PrintF(
      "\n| run | recompute | step s, predicted | reported | TFLOP/s/GPU, "
      "predicted | reported | Megatron's FLOPs / ours | bubble | EP "
      "all-to-all | compute |\n| --- | --- | ---: | ---: | ---: | ---: | "
      "---: | ---: | ---: | ---: |\n");
  for (const SeedRun& run : runs) {
    std::optional<Evaluation> e = AsRun(run);
    if (!e) continue;
    const StepTime& t = e->time;
    const MicroBatchTime& mb = t.slowest;
    const double megatron_flops =
        run.tflops_per_gpu * 1e12 * run.world * run.step_ms / 1e3;
    const double compute = mb.Compute() * t.micro_batches;
    absl::PrintF(
        "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.1f s | %.1f s | "
        "%.1f s |\n",
        run.name, RecomputeName(e->job.recompute), t.Total(), run.step_ms / 1e3,
        t.TflopsPerDevice(run.world), run.tflops_per_gpu,
        megatron_flops / t.model_flops, t.bubble,
        mb.expert_parallel * t.micro_batches, compute);
  }
}

void Recommendations(const std::vector<SeedRun>& runs) {
  absl::PrintF(
      "\n| run | planner's best | its step s | seed split's step s | seed "
      "split's place among fitting | predicted speed-up |\n| --- | --- | "
      "---: | ---: | ---: | ---: |\n");
  for (const SeedRun& run : runs) {
    std::optional<Evaluation> seed = AsRun(run);
    absl::StatusOr<SearchResult> result = SearchSplits(
        run.job, run.world, run.cluster, KernelRates(), SearchOptions());
    if (!seed || !result.ok() || result->best.empty()) continue;
    const Evaluation& best = result->best.front();
    const bool fits = seed->Fits(run.cluster.device);
    absl::PrintF("| %s | %s, %s, %s | %.2f | %.2f | %s | %.2fx |\n", run.name,
                 SplitName(best.plan), RecomputeName(best.job.recompute),
                 best.plan.layout.empty() ? "one stage" : best.plan.layout,
                 best.time.Total(), seed->time.Total(),
                 fits ? absl::StrFormat("%d of %d",
                                        RankAmong(*result, seed->time.Total()),
                                        result->fitting_seconds.size())
                      : "does not fit",
                 seed->time.Total() / best.time.Total());
  }
}

}  // namespace
}  // namespace glm

int main() {
  const std::vector<glm::SeedRun> runs = glm::SeedRuns();
  glm::MemoryTable(runs);
  glm::TimeTable(runs);
  glm::Recommendations(runs);
  return 0;
}
