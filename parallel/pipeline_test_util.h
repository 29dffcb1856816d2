// Shared pieces of the pipeline tests: a layout planned for a model, and one
// pp rank's stages run on the pipeline schedule over Gloo groups of its own
// (so that threads can stand in for worker processes).
#ifndef GLM_PARALLEL_PIPELINE_TEST_UTIL_H_
#define GLM_PARALLEL_PIPELINE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gloo/rendezvous/store.h"
#include "model/config.h"
#include "model/glm_model.h"
#include "model/parameters.h"
#include "parallel/gloo_collectives.h"
#include "parallel/pipeline_edges.h"
#include "parallel/pipeline_layout.h"
#include "parallel/stage_model.h"

namespace glm {

// Micro batch m of the pipeline tests: two sequences of pseudo-random ids.
Batch PipelineTestBatch(int64_t m);

// glm5.2-tiny with the pipeline tests' random weights.
ModelParameters TinyPipelineParameters();

// PlanStages for `config`'s layers, MTP layers and index sharing.
absl::StatusOr<std::vector<StageSlice>> PlanForModel(const ModelConfig& config,
                                                     const std::string& layout,
                                                     int pp);

// A rank's links over two whole pipeline groups (`forward` for the hidden
// states, `backward` for their gradients), as tests whose threads connect
// groups by name give them: Gloo's sends do not wait for their receivers,
// so the two groups stand in for the edges.
PipelineLinks RingLinks(Collectives& forward, Collectives& backward);

// Pipeline edges over Gloo groups of `store`, for pp rank `rank` of `pp`.
absl::StatusOr<std::unique_ptr<PipelineEdges>> ConnectGlooEdges(
    gloo::rendezvous::Store& store, int rank, int pp);

struct PipelineRankRun {
  // The rank's pipeline group and edges, still connected (for collectives
  // after).
  std::unique_ptr<GlooCollectives> group;
  std::unique_ptr<PipelineEdges> edges;
  StageLosses losses;
};

// Connects pp rank `rank` of `pp` through `store`, builds its stages of
// `plan` on `params` and runs `micro_batches` micro batches through them on
// the pipeline schedule (weight gradients accumulate in `params`). The
// backend's tensors live on `memory` (null: host), where `params` must too.
absl::StatusOr<PipelineRankRun> RunPipelineRank(
    gloo::rendezvous::Store& store, const std::vector<StageSlice>& plan,
    int rank, int pp, ModelParameters& params, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch,
    Allocator* memory = nullptr);

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_TEST_UTIL_H_
