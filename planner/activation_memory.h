// Activations of one micro batch on one rank: what each pipeline stage keeps
// from its forward to its backward, by named term, and the most its passes
// allocate on top at once. Two stores (planner/plan_job.h):
// - kFp32 and kFp32Bf16Copies: this trainer's tensors as model/*.h and
//   parallel/stage_model.h keep them (activation_fp32.cc), those of
//   Backend::ActivationType() in bf16 under kFp32Bf16Copies; the CPU
//   backend's host vectors or the CUDA backend's scratch by the job's device;
// - kBf16Mixed: Megatron-Core's bf16 training (activation_bf16.cc).
// Megatron's recomputation (selective or full) applies to kBf16Mixed; this
// trainer recomputes whole layers (full), as one model per rank only.
#ifndef GLM_PLANNER_ACTIVATION_MEMORY_H_
#define GLM_PLANNER_ACTIVATION_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline_layout.h"
#include "planner/plan_job.h"
#include "planner/split.h"

namespace glm {

// One micro batch's tokens as a rank sees them.
struct TokenShare {
  int64_t all = 0;    // the micro batch: keys and values span them all
  int64_t chunk = 0;  // the rank's context-parallel chunk (its queries)
  int64_t local = 0;  // its rows between layers (sequence parallel)
  int64_t topk = 0;   // keys attended per query: min(index_topk, seq_length)
  // Routed (token, expert) rows the busiest expert rank runs.
  int64_t routed = 0;
};
TokenShare TokenShareOf(const PlanJob& job, const Split& split);

struct MemoryTerm {
  std::string name;
  int64_t bytes = 0;
  // In host vectors: in a CPU rank's memory, never on a device.
  bool host = false;
};

int64_t TotalBytes(const std::vector<MemoryTerm>& terms);
// Bytes of the terms on the device (host false).
int64_t DeviceBytes(const std::vector<MemoryTerm>& terms);
// What the terms add to the peak of a rank on `device`: a CPU rank's memory
// is the host's, every term; a GPU's peak is its device terms'.
int64_t RankBytes(const std::vector<MemoryTerm>& terms, RankDevice device);

// Kept from forward to backward for one micro batch of `stage`, and the
// largest allocation on top of it while the stage runs that micro batch.
struct StageActivationBytes {
  // Where the rank runs: which terms its peak counts (RankBytes).
  RankDevice device = RankDevice::kGpu;
  std::vector<MemoryTerm> saved;
  std::vector<MemoryTerm> transient;  // the peak moment's parts
  // On a GPU, the CUDA backend's two grow-only scratch buffers at the most
  // this stage's ops ask of each: allocated at the first such call and held
  // from then on, under every later moment (not per micro batch).
  std::vector<MemoryTerm> scratch;
  // Still alive after the micro batch's backward: a GlmModel keeps the
  // last micro batch's index arrays (its backward frees the activations).
  int64_t kept_after_backward = 0;

  int64_t saved_bytes() const { return RankBytes(saved, device); }
  int64_t transient_bytes() const { return RankBytes(transient, device); }
  int64_t scratch_bytes() const { return TotalBytes(scratch); }
};

// Whether this trainer runs `split` as one GlmModel (no pipeline, tensor or
// context parallelism) rather than as stages: a GlmModel keeps its last
// micro batch's index arrays through the gradient exchange after the step's
// micro batches.
bool RunsAsOneModel(const Split& split);

// This trainer's rules for one of its layers (1-indexed; past
// num_hidden_layers the MTP layers): whether the layer forms its indexer
// loss in its forward, and how many of the micro batch's queries on this
// rank attend in MLA's latent form (model/mla_attention.h).
bool IndexerLossInForward(const PlanJob& job, int layer);
int64_t LatentQueries(const PlanJob& job, const Split& split, int layer);

// How this trainer runs one MoE layer's routed rows in this process
// (ExpertChunking, model/moe.h): a layer of more tokens than
// expert_chunk_tokens, without expert parallelism, runs its experts a chunk
// of that many tokens at a time, each chunk grouped by expert on its own;
// under recomputation each chunk's expert rows (gathered inputs, gate|up,
// SwiGLU output, outputs) are dropped after its forward and formed again in
// its backward. Otherwise one block of every routed row.
struct ExpertChunks {
  int64_t count = 1;      // blocks of grouped rows
  int64_t rows = 0;       // routed rows of each block but the last
  int64_t last_rows = 0;  // of the last block (every row when count is 1)
  bool formed_in_backward = false;
};
ExpertChunks ExpertChunksOf(const PlanJob& job, const Split& split);

// InvalidArgument naming --recompute when this store cannot recompute.
absl::StatusOr<StageActivationBytes> StageActivationMemory(
    const PlanJob& job, const Split& split, const StageSlice& stage);

// The per-profile halves, with recomputation already checked.
StageActivationBytes Fp32StageActivations(const PlanJob& job,
                                          const Split& split,
                                          const StageSlice& stage);
StageActivationBytes Bf16StageActivations(const PlanJob& job,
                                          const Split& split,
                                          const StageSlice& stage);

}  // namespace glm

#endif  // GLM_PLANNER_ACTIVATION_MEMORY_H_
