// Expert parallelism: member r of the expert-parallel group holds routed
// experts [r * E / size, (r + 1) * E / size). Each (token, k) slot's hidden
// state goes to the member holding its chosen expert by all-to-all
// (dispatch); that member runs its experts on every row it received and
// sends the outputs back, and the sender weights and adds them to their
// tokens (combine). Backward: the sender forms each row's output gradient
// and its router weight's gradient, as one process does; the output
// gradients go to the experts and the input gradients come back, so an
// expert's weight gradients stay on the member holding it. Every exchange
// carries rows of the activation type (bf16 on a GPU), never the router
// weights.
#ifndef GLM_PARALLEL_EXPERT_PARALLEL_DISPATCH_H_
#define GLM_PARALLEL_EXPERT_PARALLEL_DISPATCH_H_

#include <cstdint>

#include "collectives/collectives.h"
#include "model/expert_dispatch.h"

namespace glm {

// The routed experts member `rank` of `size` holds: [first, first + count).
struct ExpertRange {
  int64_t first = 0;
  int64_t count = 0;
};
ExpertRange ExpertsOfRank(int64_t num_experts, int size, int rank);

// The MoE parameters passed to Forward/Backward hold this member's experts
// only (a trainer's rank allocates only those: parallel/rank_tensors.h); the
// router and shared experts are whole.
class ExpertParallelDispatcher : public ExpertDispatcher {
 public:
  // `group` (the expert-parallel group) must outlive the dispatcher.
  explicit ExpertParallelDispatcher(Collectives* group) : group_(group) {}

  void Forward(Backend& backend, const MoeParameters& p, ConstMatrixView x,
               ExpertGrouping grouping, ConstMatrixView weights, MatrixView out,
               RoutedActivations* acts) override;
  void Backward(Backend& backend, MoeParameters& p,
                const RoutedActivations& acts, ConstMatrixView dout,
                MatrixView dx, MatrixView dweights) override;
  // The first failure of this dispatcher's exchanges, those the group
  // queued on the device included.
  absl::Status status() const override;

 private:
  absl::Status TryForward(Backend& backend, const MoeParameters& p,
                          ConstMatrixView x, ExpertGrouping grouping,
                          ConstMatrixView weights, MatrixView out,
                          RoutedActivations* acts);
  absl::Status TryBackward(Backend& backend, MoeParameters& p,
                           const RoutedActivations& acts, ConstMatrixView dout,
                           MatrixView dx, MatrixView dweights);

  Collectives* group_;
  absl::Status status_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_EXPERT_PARALLEL_DISPATCH_H_
