#include "model/loss_targets.h"

namespace glm {

std::vector<int32_t> LossTargets(const std::vector<int32_t>& ids,
                                 const std::vector<float>& loss_mask,
                                 const TokenLayout& layout, int ahead,
                                 int64_t* count) {
  std::vector<int32_t> targets(ids.size(), -1);
  *count = 0;
  for (int64_t t = 0; t < layout.tokens; ++t) {
    if (t + ahead >= layout.seq_end[t]) continue;
    if (!loss_mask.empty() && loss_mask[t + ahead - 1] == 0.f) continue;
    targets[t] = ids[t + ahead];
    ++*count;
  }
  return targets;
}

}  // namespace glm
