// Which token each position is trained to predict, for the LM loss (one ahead)
// and the MTP loss (two ahead): never across a sequence boundary, and only
// where the loss mask allows. Shared by the whole model and by pipeline stages.
#ifndef GLM_MODEL_LOSS_TARGETS_H_
#define GLM_MODEL_LOSS_TARGETS_H_

#include <cstdint>
#include <vector>

#include "model/token_layout.h"

namespace glm {

// The prediction at t is of ids[t + ahead] when t + ahead lies in t's sequence
// and loss_mask[t + ahead - 1] is not 0 (an empty mask allows all); -1
// otherwise. `count` gets the number of targets.
std::vector<int32_t> LossTargets(const std::vector<int32_t>& ids,
                                 const std::vector<float>& loss_mask,
                                 const TokenLayout& layout, int ahead,
                                 int64_t* count);

}  // namespace glm

#endif  // GLM_MODEL_LOSS_TARGETS_H_
