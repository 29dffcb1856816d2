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

PipelineLinks RingLinks(Collectives& forward, Collectives& backward) {
  PipelineLinks links;
  links.size = forward.size();
  links.rank = forward.rank();
  const int next = (links.rank + 1) % links.size,
            previous = (links.rank + links.size - 1) % links.size;
  links.to_next = {&forward, next};
  links.from_previous = {&forward, previous};
  links.to_previous = {&backward, previous};
  links.from_next = {&backward, next};
  return links;
}

absl::StatusOr<std::unique_ptr<PipelineEdges>> ConnectGlooEdges(
    gloo::rendezvous::Store& store, int rank, int pp) {
  std::vector<int> members(pp);
  for (int r = 0; r < pp; ++r) members[r] = r;
  return PipelineEdges::Connect(
      members, rank,
      [&store](const std::string& key, int member,
               int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
        absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
            GlooCollectives::Connect(store, key, member, size, GlooOptions());
        if (!group.ok()) return group.status();
        return std::unique_ptr<Collectives>(*std::move(group));
      });
}

absl::StatusOr<PipelineRankRun> RunPipelineRank(
    gloo::rendezvous::Store& store, const std::vector<StageSlice>& plan,
    int rank, int pp, ModelParameters& params, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch, Allocator* memory) {
  PipelineRankRun run;
  absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
      GlooCollectives::Connect(store, "pp", rank, pp, GlooOptions());
  if (!group.ok()) return group.status();
  run.group = *std::move(group);
  absl::StatusOr<std::unique_ptr<PipelineEdges>> edges =
      ConnectGlooEdges(store, rank, pp);
  if (!edges.ok()) return edges.status();
  run.edges = *std::move(edges);
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
  // The stages' tensors in the backend's memory, the edges reached through
  // views for it.
  PipelineLinkViews views(run.edges->Links(), memory);
  absl::StatusOr<StageLosses> losses =
      RunPipelineSchedule(pointers, views.For(memory != nullptr), memory,
                          micro_batches, micro_batch);
  if (!losses.ok()) return losses.status();
  run.losses = *std::move(losses);
  return run;
}

}  // namespace glm
