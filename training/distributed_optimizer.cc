#include "training/distributed_optimizer.h"

#include <algorithm>
#include <numeric>

#include "kernels/tensor_arena.h"
#include "training/gradient_sync.h"

namespace glm {
namespace {

// Copies the tensors [first, end) into `flat` (or back out of it), where
// they lie (`memory`: all in one).
void Pack(Allocator* memory, const std::vector<Tensor*>& tensors, int64_t first,
          int64_t end, float* flat) {
  for (int64_t t = first; t < end; ++t) {
    CopyFloats(memory, flat, tensors[t]->data(), tensors[t]->numel());
    flat += tensors[t]->numel();
  }
}

void Unpack(Allocator* memory, const float* flat, int64_t first, int64_t end,
            const std::vector<Tensor*>& tensors) {
  for (int64_t t = first; t < end; ++t) {
    CopyFloats(memory, tensors[t]->data(), flat, tensors[t]->numel());
    flat += tensors[t]->numel();
  }
}

}  // namespace

ParameterShards::ParameterShards(const std::vector<int64_t>& sizes, int ranks) {
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  first_.push_back(0);
  int64_t t = 0, before = 0;
  for (int r = 0; r < ranks; ++r) {
    // Rank r takes tensors until the elements dealt so far reach (r + 1) /
    // ranks of the total; the last rank takes the rest.
    const int64_t target = total * (r + 1) / ranks;
    int64_t size = 0;
    while (t < static_cast<int64_t>(sizes.size()) &&
           (r == ranks - 1 || before + size < target)) {
      size += sizes[t++];
    }
    before += size;
    block_ = std::max(block_, size);
    first_.push_back(t);
  }
}

absl::Status ParameterShards::ReduceScatter(
    Collectives& group, const std::vector<Tensor*>& tensors) const {
  if (SpansOf(tensors).owning.empty()) {
    // In an arena: summed where they lie, every shard's (a reduce-scatter of
    // whole tensors would need them laid out in equal blocks; Gloo's runs as
    // an all-reduce of such a packed copy anyway).
    return AllReduceWhereTheyLie(group, tensors);
  }
  const int ranks = group.size();
  Allocator* memory = MemoryOf(tensors);
  Tensor flat({block_ * ranks}, memory);
  for (int r = 0; r < ranks; ++r) {
    Pack(memory, tensors, first(r), end(r), flat.data() + r * block_);
  }
  Tensor mine({block_}, memory);
  if (absl::Status status =
          group.ReduceScatter(flat.data(), block_, mine.data(), ReduceOp::kSum);
      !status.ok()) {
    return status;
  }
  Unpack(memory, mine.data(), first(group.rank()), end(group.rank()), tensors);
  return absl::OkStatus();
}

absl::Status ParameterShards::AllGather(
    Collectives& group, const std::vector<Tensor*>& tensors) const {
  if (SpansOf(tensors).owning.empty()) {
    // In an arena: each rank's shard sent from where it lies to where the
    // others keep it, one broadcast per run of its tensors.
    for (int r = 0; r < group.size(); ++r) {
      const std::vector<Tensor*> shard(tensors.begin() + first(r),
                                       tensors.begin() + end(r));
      for (const FloatSpan& span : SpansOf(shard).spans) {
        if (absl::Status status = group.Broadcast(span.data, span.size, r);
            !status.ok()) {
          return status;
        }
      }
    }
    return absl::OkStatus();
  }
  const int ranks = group.size();
  Allocator* memory = MemoryOf(tensors);
  Tensor mine({block_}, memory);
  Pack(memory, tensors, first(group.rank()), end(group.rank()), mine.data());
  Tensor flat({block_ * ranks}, memory);
  if (absl::Status status = group.AllGather(mine.data(), block_, flat.data());
      !status.ok()) {
    return status;
  }
  for (int r = 0; r < ranks; ++r) {
    Unpack(memory, flat.data() + r * block_, first(r), end(r), tensors);
  }
  return absl::OkStatus();
}

}  // namespace glm
