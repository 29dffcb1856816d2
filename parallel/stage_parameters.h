// Which of the model's tensors each pipeline rank computes with, so that a
// rank can sum, clip, update and save only those instead of the whole model:
// a stage reads its decoder layers; the first stage the embedding; the last
// stage the final norm and output head, and with MTP the MTP layer and the
// embedding table again (as in Megatron, where the last stage keeps its own
// copy of the embedding for MTP and tied heads, and the two copies' gradients
// are summed). Only tensors read on more than one pp rank need a sum over the
// pipeline group; every tensor is owned (counted in the gradient norm, saved)
// by the lowest pp rank that reads it.
//
// Tensor names are ModelParameters::Named() names.
#ifndef GLM_PARALLEL_STAGE_PARAMETERS_H_
#define GLM_PARALLEL_STAGE_PARAMETERS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "parallel/pipeline_layout.h"

namespace glm {

// The tensors that `stages` (some stages of a plan, e.g. one pp rank's
// virtual chunks) read.
std::set<std::string> StageTensorNames(ModelParameters& params,
                                       const std::vector<StageSlice>& stages);

struct PipelineTensors {
  std::set<std::string> used;   // read by this rank's stages
  std::set<std::string> owned;  // used here and by no lower pp rank
  // Read on more than one pp rank (here or not), in Named() order: the same
  // list on every rank of the pipeline group. The ranks that read one sum
  // their gradients of it.
  std::vector<std::string> shared;
  // The pp ranks reading each shared tensor, lowest first.
  std::map<std::string, std::vector<int>> readers;
};

// This pp rank's view, from every stage of the plan.
PipelineTensors PipelineTensorsOf(ModelParameters& params,
                                  const std::vector<StageSlice>& plan,
                                  int pp_rank);

}  // namespace glm

#endif  // GLM_PARALLEL_STAGE_PARAMETERS_H_
