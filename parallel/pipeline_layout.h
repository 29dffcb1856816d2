// Pipeline stages of a GLM model under Megatron's layout rules plus GLM-5.2's
// cross-layer index sharing.
//
// A layout is N stages; stage i runs on pp rank i % PP as virtual chunk i / PP,
// and stages hold consecutive decoder layers in stage order (1-indexed global
// layer numbers). Megatron's rules: N % PP == 0; exactly one `E`, the first
// symbol of stage 0; exactly one `L`, the last symbol of the last stage; as
// many `t` as decoder layers and `m` as MTP layers; no `t` after an `m`; all
// `m` in one stage, which is the last virtual chunk of its pp rank; empty
// stages are allowed. Index sharing adds: a stage holding decoder layers starts
// on a computing layer, since a skip layer reads the top-k of its source layer,
// which must run in the same stage.
#ifndef GLM_PARALLEL_PIPELINE_LAYOUT_H_
#define GLM_PARALLEL_PIPELINE_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/index_sharing.h"

namespace glm {

struct LayoutRequest {
  std::string layout;  // Megatron layout string; empty => even or uneven split
  int num_layers = 0;  // decoder layers ('t')
  int mtp_layers = 0;  // 'm'
  int pp = 1;
  // Virtual stages per pp rank; 0 or 1 = none. With a layout string it is
  // derived from the stage count, and a value above 1 must agree with it.
  int vpp = 1;
  IndexSharing sharing;
  int num_layers_in_first_stage = 0;  // Megatron uneven split (0 = unset)
  int num_layers_in_last_stage = 0;
};

struct StageSlice {  // one pipeline stage (virtual chunk of a pp rank)
  int stage = 0, pp_rank = 0, virtual_chunk = 0;
  // 1-indexed global decoder layers, 0/0 when the stage holds none.
  int first_layer = 0, last_layer = 0;
  bool has_embedding = false, has_loss = false;
  int mtp_layers = 0;
  std::vector<int> computing_layers;

  int num_layers() const {
    return first_layer == 0 ? 0 : last_layer - first_layer + 1;
  }
};

// "stage 2 (pp rank 2, virtual chunk 0)", as errors and tables name stages.
std::string StageName(int stage, int pp);

// Bounds that keep a mistyped size from exhausting memory; real models are far
// below them.
inline constexpr int kMaxLayers = 1 << 16;  // num_layers + mtp_layers
inline constexpr int kMaxStages = 1 << 16;  // pp * vpp

// Checks the request's numbers (sizes positive and within the bounds above,
// index-sharing parameters usable) and that a layout string and an uneven split
// are not both given.
absl::Status ValidateRequest(const LayoutRequest& request);

// The stages' symbol strings ("Ettt", "tt", "mL"): the parsed layout, or the
// even or uneven split when the layout is empty. Validates the request, not the
// stages.
absl::StatusOr<std::vector<std::string>> RequestedStages(
    const LayoutRequest& request);

// Megatron's rules on `stages` (see the file comment); the first violation
// found.
absl::Status ValidateStageRules(const std::vector<std::string>& stages,
                                const LayoutRequest& request);

// Layer ranges and marks of each stage. Assumes `stages` passed
// ValidateStageRules.
std::vector<StageSlice> DescribeStages(const std::vector<std::string>& stages,
                                       int pp, const IndexSharing& sharing);

// The index-sharing rule; the error lists every stage that starts on a skip
// layer, with its first layer and the source computing layer it would need.
absl::Status CheckIndexSharing(const std::vector<StageSlice>& slices, int pp,
                               const IndexSharing& sharing);

// Parses and validates; InvalidArgument message names the rule, and for the
// index-sharing rule: the stage (pp rank, virtual chunk), its first layer, and
// the source computing layer it would need.
absl::StatusOr<std::vector<StageSlice>> PlanStages(
    const LayoutRequest& request);

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_LAYOUT_H_
