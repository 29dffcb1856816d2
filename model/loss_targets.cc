#include "model/loss_targets.h"

namespace glm {

std::vector<int32_t> LossTargets(const Batch& batch, const TokenLayout& layout,
                                 int ahead, int64_t* count) {
  std::vector<int32_t> targets(layout.tokens, -1);
  *count = 0;
  const bool labelled = !batch.last_labels.empty();
  int64_t sequence = -1;
  for (int64_t t = 0; t < layout.tokens; ++t) {
    if (t == layout.seq_start[t]) ++sequence;
    const int64_t end = layout.seq_end[t];
    if (t + ahead > end || (t + ahead == end && !labelled)) continue;
    if (!batch.loss_mask.empty() && batch.loss_mask[t + ahead - 1] == 0.f) {
      continue;
    }
    targets[t] = t + ahead < end ? batch.input_ids[t + ahead]
                                 : batch.last_labels[sequence];
    ++*count;
  }
  return targets;
}

}  // namespace glm
