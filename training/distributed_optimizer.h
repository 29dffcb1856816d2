// ZeRO-1 (Megatron's distributed optimizer) over a data-parallel group: the
// trainable tensors are dealt out to the ranks in contiguous, size-balanced
// shards of whole tensors; gradients are reduced so that each rank holds the
// summed gradients of its shard, each rank updates (and keeps AdamW moments
// for) only its shard, and the updated parameters are all-gathered.
// The result equals an all-reduce followed by a full update on every rank.
#ifndef GLM_TRAINING_DISTRIBUTED_OPTIMIZER_H_
#define GLM_TRAINING_DISTRIBUTED_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collectives/collectives.h"
#include "kernels/tensor.h"

namespace glm {

class ParameterShards {
 public:
  // Shards of tensors with `sizes` elements (in order) over `ranks` ranks.
  ParameterShards(const std::vector<int64_t>& sizes, int ranks);

  // Tensors [first(r), end(r)) form rank r's shard.
  int64_t first(int rank) const { return first_[rank]; }
  int64_t end(int rank) const { return first_[rank + 1]; }

  // Every rank passes its own copies of the same tensors (in the order of
  // `sizes`), placed alike (kernels/tensor_arena.h). Tensors that lie in an
  // arena (a model's: host or device) are exchanged where they lie: the
  // gradients all-reduced span by span, the weights broadcast from each
  // shard's rank span by span. Otherwise (LoRA adapters, tensors of their
  // own) both collectives exchange one padded block per rank, the tensors
  // packed into it.
  // ReduceScatter: the tensors of this rank's shard become their sums over
  // `group`; the others become their sums too (in an arena) or are left as
  // they were.
  absl::Status ReduceScatter(Collectives& group,
                             const std::vector<Tensor*>& tensors) const;
  // Every rank's shard of the tensors copied to all ranks.
  absl::Status AllGather(Collectives& group,
                         const std::vector<Tensor*>& tensors) const;

 private:
  // Elements of the largest shard: each shard is padded to it in the flat
  // buffers the collectives exchange.
  int64_t block_ = 0;
  std::vector<int64_t> first_;
};

}  // namespace glm

#endif  // GLM_TRAINING_DISTRIBUTED_OPTIMIZER_H_
