#include "planner/split.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "parallel/layout_parser.h"
#include "parallel/layout_planner.h"
#include "parallel/tensor_parallel_shard.h"

namespace glm {
namespace {

// The error under the flag's name instead of the job-spec field's the
// reused check names ("parallel.tp: ..." becomes "--tp: ...").
absl::Status Prefixed(const std::string& flag, const absl::Status& status) {
  if (status.ok()) return status;
  absl::string_view message = status.message();
  if (absl::StartsWith(message, "parallel.")) {
    message.remove_prefix(message.find(": ") + 2);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", message));
}

LayoutRequest RequestOf(const PlanJob& job, const Split& split) {
  LayoutRequest request;
  request.layout = split.layout;
  request.num_layers = job.model.num_hidden_layers;
  request.mtp_layers = job.model.num_mtp_layers;
  request.pp = split.pp;
  request.vpp = split.vpp;
  request.sharing = job.model.index_sharing;
  return request;
}

// With index sharing the MTP layer reuses the last decoder layer's top-k,
// so the trainer runs it after that layer in the loss's stage
// (parallel/stage_model.cc).
bool MtpNeedsLastLayer(const ModelConfig& m) {
  return m.num_mtp_layers > 0 && m.index_sharing.topk_freq > 1;
}

// Moves the MTP layers into the last stage (the loss's) and, when that
// stage holds no decoder layer, the layers from the last layer's source
// computing layer on, taking them from the stages before it.
std::string WithMtpBesideLastLayer(std::vector<std::string> stages,
                                   const ModelConfig& m) {
  std::string& last = stages.back();
  int mtp = 0;
  for (std::string& stage : stages) {
    mtp += static_cast<int>(std::count(stage.begin(), stage.end(), 'm'));
    stage.erase(std::remove(stage.begin(), stage.end(), 'm'), stage.end());
  }
  last.insert(last.find('L'), std::string(mtp, 'm'));
  // Every 't' comes before the 'm's: a last stage with one holds the last
  // decoder layer.
  if (last.find('t') != std::string::npos) return FormatLayout(stages);
  const int layers = m.num_hidden_layers;
  const int move = layers - m.index_sharing.SourceLayer(layers) + 1;
  int moved = 0;
  for (size_t s = stages.size() - 1; s-- > 0 && moved < move;) {
    std::string& stage = stages[s];
    for (size_t t = stage.find_last_of('t');
         t != std::string::npos && moved < move; t = stage.find_last_of('t')) {
      stage.erase(t, 1);
      ++moved;
    }
  }
  last.insert(0, std::string(moved, 't'));
  return FormatLayout(stages);
}

// The given layout, the planner's for pp > 1, or none for one stage.
absl::StatusOr<std::string> LayoutOf(const PlanJob& job, const Split& split) {
  if (!split.layout.empty() || (split.pp == 1 && split.vpp <= 1)) {
    return split.layout;
  }
  absl::StatusOr<std::string> planned = PlanLayout(RequestOf(job, split));
  if (!planned.ok()) return Prefixed("--layout", planned.status());
  absl::StatusOr<std::vector<std::string>> stages = ParseLayout(*planned);
  if (!stages.ok()) return stages.status();
  if (!MtpNeedsLastLayer(job.model)) return planned;
  return WithMtpBesideLastLayer(*std::move(stages), job.model);
}

absl::Status CheckMtpStage(const ModelConfig& m,
                           const std::vector<StageSlice>& stages, int pp) {
  if (!MtpNeedsLastLayer(m)) return absl::OkStatus();
  for (const StageSlice& stage : stages) {
    if (stage.mtp_layers > 0 &&
        (stage.last_layer != m.num_hidden_layers || !stage.has_loss)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layout: ", StageName(stage.stage, pp),
          " holds the MTP layer without decoder layer ", m.num_hidden_layers,
          " (whose top-k it reuses) and the loss before it"));
    }
  }
  return absl::OkStatus();
}

// What the schedules need of the batch: whole micro batches per data-
// parallel rank, whole groups of pp under the interleaved schedule
// (parallel/pipeline_schedule.h), and Megatron's context-parallel chunks:
// 2 * cp equal pieces of every sequence (load balancing).
absl::Status CheckBatch(const PlanJob& job, const SplitPlan& plan) {
  if (job.micro_batches() % plan.dp() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch: ", job.micro_batches(),
                     " micro batches do not divide over dp ", plan.dp()));
  }
  const int64_t per_rank = job.micro_batches() / plan.dp();
  if (plan.stages.size() > static_cast<size_t>(plan.split.pp) &&
      per_rank % plan.split.pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vpp: the interleaved schedule runs micro batches in groups of pp ",
        plan.split.pp, "; ", per_rank, " per data-parallel rank is not"));
  }
  if (plan.split.cp > 1 && job.seq_length % (2 * plan.split.cp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cp: ", plan.split.cp, " needs a sequence length that ",
        "splits into 2 * cp equal chunks; ", job.seq_length, " does not"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<StageSlice> SplitPlan::StagesOf(int pp_rank) const {
  std::vector<StageSlice> mine;
  for (const StageSlice& stage : stages) {
    if (stage.pp_rank == pp_rank) mine.push_back(stage);
  }
  std::sort(mine.begin(), mine.end(),
            [](const StageSlice& a, const StageSlice& b) {
              return a.virtual_chunk < b.virtual_chunk;
            });
  return mine;
}

std::string SplitName(const SplitPlan& plan) {
  const Split& s = plan.split;
  const int vpp = static_cast<int>(plan.stages.size()) / s.pp;
  return absl::StrCat("TP", s.tp, " PP", s.pp, " VPP", vpp, " CP", s.cp, " EP",
                      s.ep, " ETP", s.etp, " DP", plan.dp());
}

absl::StatusOr<SplitPlan> PlanSplit(const PlanJob& job, int world,
                                    const Split& split) {
  SplitPlan plan;
  plan.split = split;
  plan.world = world;
  if (absl::Status status = CheckTensorParallelSize(job.model, split.tp);
      !status.ok()) {
    return Prefixed("--tp", status);
  }
  GridSpec grid;
  grid.world = world;
  grid.tp = split.tp;
  grid.pp = split.pp;
  grid.cp = split.cp;
  grid.ep = split.ep;
  grid.etp = split.etp;
  grid.num_experts = job.model.n_routed_experts;
  absl::StatusOr<RankGrid> ranks = BuildRankGrid(grid);
  if (!ranks.ok()) return Prefixed("--world", ranks.status());
  plan.grid = *std::move(ranks);
  if (job.model.moe_intermediate_size % split.etp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etp: ", split.etp,
                     " does not divide the model's "
                     "moe_intermediate_size ",
                     job.model.moe_intermediate_size));
  }
  if (split.pp == 1 && split.vpp > 1) {
    return absl::InvalidArgumentError(
        "--vpp: virtual pipeline stages need pp > 1");
  }
  absl::StatusOr<std::string> layout = LayoutOf(job, split);
  if (!layout.ok()) return layout.status();
  plan.layout = *layout;
  LayoutRequest request = RequestOf(job, split);
  request.layout = plan.layout;
  absl::StatusOr<std::vector<StageSlice>> stages = PlanStages(request);
  if (!stages.ok()) return Prefixed("--layout", stages.status());
  plan.stages = *std::move(stages);
  if (absl::Status status = CheckMtpStage(job.model, plan.stages, split.pp);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckBatch(job, plan); !status.ok()) {
    return status;
  }
  return plan;
}

}  // namespace glm
