#include "parallel/pipeline_order.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace glm {

absl::StatusOr<std::vector<PipelineOp>> PipelineOrder(int pp, int rank,
                                                      int chunks,
                                                      int64_t micro_batches) {
  if (chunks > 1 && micro_batches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the interleaved pipeline schedule needs the micro batches per step (",
        micro_batches, ") to be a multiple of pp ", pp));
  }
  const int64_t total = micro_batches * chunks;
  int64_t warmup = std::min<int64_t>(pp - rank - 1, total);
  if (chunks > 1) {
    warmup =
        micro_batches == pp
            ? total
            : std::min<int64_t>((pp - rank - 1) * 2 + (chunks - 1) * pp, total);
  }
  // Virtual step k: micro batches in groups of pp, each group through every
  // chunk (forwards in chunk order, backwards in reverse).
  auto op = [&](int64_t k, bool forward) {
    const int64_t group = k / (pp * chunks), within = k % (pp * chunks);
    const int chunk = static_cast<int>(within / pp);
    return PipelineOp{forward, forward ? chunk : chunks - 1 - chunk,
                      group * pp + within % pp};
  };
  std::vector<PipelineOp> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(op(k, true));
  for (int64_t k = warmup; k < total; ++k) {
    order.push_back(op(k, true));
    order.push_back(op(k - warmup, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) {
    order.push_back(op(k, false));
  }
  return order;
}

}  // namespace glm
