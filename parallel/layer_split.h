// Megatron's layer split when no layout string is given: even (--num-layers
// divided over PP * VPP stages) or uneven
// (--decoder-first/last-pipeline-num-layers give the first and/or last pp
// rank's layers and the rest divide evenly over the middle ranks). Each pp
// rank's layers divide evenly over its VPP virtual chunks. The embedding goes
// at the start of stage 0; MTP layers and the loss at the end of the last
// stage.
#ifndef GLM_PARALLEL_LAYER_SPLIT_H_
#define GLM_PARALLEL_LAYER_SPLIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline_layout.h"

namespace glm {

// Stage symbol strings of the split; InvalidArgument naming the count that does
// not divide. Ignores request.layout.
absl::StatusOr<std::vector<std::string>> SplitLayers(
    const LayoutRequest& request);

}  // namespace glm

#endif  // GLM_PARALLEL_LAYER_SPLIT_H_
