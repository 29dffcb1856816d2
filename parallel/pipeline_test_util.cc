#include "parallel/pipeline_test_util.h"

#include <utility>

#include "kernels/cpu/cpu_backend.h"
#include "parallel/pipeline_schedule.h"

namespace glm {

Batch PipelineTestBatch(int64_t m) {
  std::vector<std::vector<int32_t>> rows(2);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 20 + 3 * r; ++i) {
      rows[r].push_back(static_cast<int32_t>((m * 131 + r * 71 + i * i) % 509));
    }
  }
  return Batch::FromSequences(rows);
}

ModelParameters TinyPipelineParameters() {
  ModelParameters params(*PresetConfig("glm5.2-tiny"));
  params.InitRandom(11);
  return params;
}

absl::StatusOr<std::vector<StageSlice>> PlanForModel(const ModelConfig& config,
                                                     const std::string& layout,
                                                     int pp) {
  LayoutRequest request;
  request.layout = layout;
  request.num_layers = config.num_hidden_layers;
  request.mtp_layers = config.num_mtp_layers;
  request.pp = pp;
  request.sharing = config.index_sharing;
  return PlanStages(request);
}

absl::StatusOr<PipelineRankRun> RunPipelineRank(
    gloo::rendezvous::Store& store, const std::vector<StageSlice>& plan,
    int rank, int pp, ModelParameters& params, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch, Allocator* memory) {
  PipelineRankRun run;
  absl::StatusOr<std::unique_ptr<GlooCollectives>> forward =
      GlooCollectives::Connect(store, "pp", rank, pp, GlooOptions());
  if (!forward.ok()) return forward.status();
  run.forward = *std::move(forward);
  absl::StatusOr<std::unique_ptr<GlooCollectives>> backward =
      GlooCollectives::Connect(store, "pp-backward", rank, pp, GlooOptions());
  if (!backward.ok()) return backward.status();
  run.backward = *std::move(backward);
  CpuBackend backend(memory);
  std::vector<StageModel> chunks;
  for (const StageSlice& slice : plan) {
    if (slice.pp_rank != rank) continue;
    absl::StatusOr<StageModel> stage =
        StageModel::Create(&params, &backend, {}, slice);
    if (!stage.ok()) return stage.status();
    chunks.push_back(*std::move(stage));
  }
  std::vector<StageModel*> pointers;
  for (StageModel& chunk : chunks) pointers.push_back(&chunk);
  absl::StatusOr<StageLosses> losses = RunPipelineSchedule(
      pointers, *run.forward, *run.backward, micro_batches, micro_batch);
  if (!losses.ok()) return losses.status();
  run.losses = *std::move(losses);
  return run;
}

}  // namespace glm
