// Which token each position is trained to predict, for the LM loss (one ahead)
// and the MTP loss (two ahead): never across a sequence boundary, and only
// where the loss mask allows. Shared by the whole model and by pipeline stages.
#ifndef GLM_MODEL_LOSS_TARGETS_H_
#define GLM_MODEL_LOSS_TARGETS_H_

#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/token_layout.h"

namespace glm {

// The prediction at t is of the token `ahead` positions on in t's sequence:
// input_ids[t + ahead] inside it, the sequence's last label one past its end
// (when the batch has last labels); -1 beyond, or where loss_mask[t + ahead -
// 1] is 0 (an empty mask allows all). `count` gets the number of targets.
std::vector<int32_t> LossTargets(const Batch& batch, const TokenLayout& layout,
                                 int ahead, int64_t* count);

}  // namespace glm

#endif  // GLM_MODEL_LOSS_TARGETS_H_
