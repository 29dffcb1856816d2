#include "planner/search.h"

#include <algorithm>
#include <memory>

#include "planner/activation_memory.h"
#include "planner/rank_tensor_list.h"

namespace glm {
namespace {

std::vector<int> Divisors(int n) {
  std::vector<int> divisors;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) divisors.push_back(d);
  }
  return divisors;
}

// Every split the sizes allow, before the layout and batch rules (PlanSplit
// checks those).
std::vector<Split> Splits(const PlanJob& job, int world,
                          const ClusterSpec& cluster,
                          const SearchOptions& options) {
  const ModelConfig& m = job.model;
  std::vector<Split> splits;
  for (int tp : Divisors(world)) {
    if (tp > cluster.fast_domain || m.num_attention_heads % tp != 0) continue;
    for (int pp : Divisors(world / tp)) {
      if (pp > m.num_hidden_layers + m.num_mtp_layers) continue;
      for (int cp : Divisors(world / tp / pp)) {
        for (int ep : Divisors(m.n_routed_experts)) {
          for (int etp = 1; etp <= options.max_etp; etp *= 2) {
            if ((world / pp) % (ep * etp) != 0) continue;
            for (int vpp = 1; vpp <= (pp > 1 ? options.max_vpp : 1); ++vpp) {
              Split split;
              split.tp = tp;
              split.pp = pp;
              split.cp = cp;
              split.ep = ep;
              split.etp = etp;
              split.vpp = vpp;
              splits.push_back(split);
            }
          }
        }
      }
    }
  }
  return splits;
}

// This trainer (its fp32 store, with or without bf16 weight copies)
// recomputes whole layers, and only as one model per rank without expert
// parallelism (planner/activation_memory.h).
std::vector<Recompute> RecomputeChoices(const PlanJob& job, const Split& split,
                                        const SearchOptions& options) {
  if (!IsTrainerStore(job.precision)) return options.recompute;
  std::vector<Recompute> choices;
  for (Recompute recompute : options.recompute) {
    const bool full_allowed = RunsAsOneModel(split) && split.ep == 1;
    if (recompute == Recompute::kNone ||
        (recompute == Recompute::kFull && full_allowed)) {
      choices.push_back(recompute);
    }
  }
  return choices;
}

// Keeps `best` the `keep` fastest seen, fastest first.
void KeepIfAmongBest(Evaluation evaluation, int keep,
                     std::vector<Evaluation>* best) {
  const double seconds = evaluation.time.Total();
  const auto at = std::upper_bound(
      best->begin(), best->end(), seconds,
      [](double s, const Evaluation& e) { return s < e.time.Total(); });
  if (at - best->begin() >= keep) return;
  best->insert(at, std::move(evaluation));
  if (static_cast<int>(best->size()) > keep) best->pop_back();
}

}  // namespace

absl::StatusOr<SearchResult> SearchSplits(const PlanJob& job, int world,
                                          const ClusterSpec& cluster,
                                          const KernelRates& rates,
                                          const SearchOptions& options) {
  const auto cache = std::make_shared<RankTensorsCache>(job.model);
  SearchResult result;
  for (const Split& split : Splits(job, world, cluster, options)) {
    absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, split);
    if (!plan.ok()) continue;
    plan->tensors_cache = cache;
    for (Recompute recompute : RecomputeChoices(job, split, options)) {
      PlanJob variant = job;
      variant.recompute = recompute;
      ++result.candidates;
      absl::StatusOr<Evaluation> evaluation =
          Evaluate(variant, *plan, cluster, rates, /*with_time=*/false);
      if (!evaluation.ok()) return evaluation.status();
      if (!evaluation->Fits(cluster.device)) continue;
      if (absl::Status timed = AddStepTime(cluster, rates, &*evaluation);
          !timed.ok()) {
        return timed;
      }
      result.fitting_seconds.push_back(evaluation->time.Total());
      KeepIfAmongBest(*std::move(evaluation), options.keep, &result.best);
    }
  }
  std::sort(result.fitting_seconds.begin(), result.fitting_seconds.end());
  return result;
}

int RankAmong(const SearchResult& result, double seconds) {
  return 1 + static_cast<int>(std::lower_bound(result.fitting_seconds.begin(),
                                               result.fitting_seconds.end(),
                                               seconds) -
                              result.fitting_seconds.begin());
}

}  // namespace glm
