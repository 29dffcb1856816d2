// Data-parallel gradient reduction: every rank's gradients summed over the
// group in as few collectives as their layout allows. Gradients in an arena
// (kernels/tensor_arena.h: a model's, in host memory or on a device) are
// reduced where they lie, one call per run of consecutive tensors (all of
// them for the whole model; a list that skips tensors, such as the dense ones
// under expert parallelism, breaks into runs); gradients that are an
// allocation each (LoRA adapters) are packed into one flat buffer, one call
// for all of them.
#ifndef GLM_TRAINING_GRADIENT_SYNC_H_
#define GLM_TRAINING_GRADIENT_SYNC_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "training/adamw.h"

namespace glm {

// The memory `tensors` lie in (the first held one's: they share it; null:
// the host's).
Allocator* MemoryOf(const std::vector<Tensor*>& tensors);

// In place: each of `tensors` (all in one memory, the host's or a device's)
// becomes its sum over `group`, the same on every member, packed into one
// flat buffer in that memory wherever each lies:
// one call, so members whose tensors are placed differently (an arena on one,
// tensors of their own on another) still make the same calls.
absl::Status AllReducePacked(Collectives& group,
                             const std::vector<Tensor*>& tensors);

// In place: each of `tensors` becomes its sum over `group`, the same on
// every member: those in an arena where they lie, one call per run of them,
// those of their own packed (AllReducePacked). Every member passes tensors of
// the same shapes placed alike, so that all make the same calls
// (kernels/tensor_arena.h SpansOf). With two members the sums are those of
// the packed path bit for bit; with more, a collective may add an element's
// contributions in an order set by its place in the call's buffer (Gloo's
// ring does), so the arena's sums and a packed copy's agree to rounding.
absl::Status AllReduceWhereTheyLie(Collectives& group,
                                   const std::vector<Tensor*>& tensors);

// AllReduceWhereTheyLie over the gradients of `params`.
absl::Status AllReduceGradients(Collectives& group,
                                const std::vector<TrainableTensor>& params);

// The sum of every member's `value`, the same on each: the values travel as
// the bytes of a double (gathered, never added as floats) and are added in
// rank order, as precise as one process's sum. A float sum of gradient norms
// would move the clipping scale by about 1e-7, enough to flip a top-k or
// routing choice a few steps later.
absl::StatusOr<double> SumInRankOrder(Collectives& group, double value);

}  // namespace glm

#endif  // GLM_TRAINING_GRADIENT_SYNC_H_
