// AdamW (decoupled weight decay, bias-corrected moments) over float32 master
// weights, as torch.optim.AdamW and Megatron's optimizer apply it. Weight decay
// skips 1-D tensors (norm weights and biases), as Megatron does.
#ifndef GLM_TRAINING_ADAMW_H_
#define GLM_TRAINING_ADAMW_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace glm {

// A weight the optimizer updates, with its gradient.
struct TrainableTensor {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

// Megatron's rule: no weight decay on biases and norm weights, i.e. 1-D
// tensors.
bool TakesWeightDecay(const Tensor& value);

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// First and second moments of one tensor. The moments AdamW makes at once
// (see MomentsOf) are views of one allocation per moment kind where their
// weights live (host memory or a device), laid out as a model's arenas are
// (kernels/tensor_arena.h: in order, each tensor at a 256-byte boundary), so
// that a step's update runs over two flat buffers.
struct AdamMoments {
  Tensor exp_avg;
  Tensor exp_avg_sq;
};

class AdamW {
 public:
  explicit AdamW(AdamWOptions options) : options_(options) {}

  // One update with learning rate `lr`; every gradient is multiplied by
  // `grad_scale` first (the clipping factor). Moments are created on first
  // use (MomentsOf(params)), where their weights live; `backend` runs the
  // update there.
  void Step(Backend& backend, const std::vector<TrainableTensor>& params,
            double lr, double grad_scale);

  int64_t steps() const { return steps_; }
  // The moments of each of `params`, in order (zeros until its first
  // update), for steps, checkpoints and distributed-optimizer gathers. The
  // ones this call creates share one allocation per moment kind where their
  // weights live (all in the same place).
  std::vector<AdamMoments*> MomentsOf(
      const std::vector<TrainableTensor>& params);
  void set_steps(int64_t steps) { steps_ = steps; }
  // Frees the moments of every tensor not named in `kept` (another rank's
  // share under the distributed optimizer, gathered for a checkpoint).
  void ReleaseMomentsExcept(const std::set<std::string>& kept);

 private:
  AdamWOptions options_;
  int64_t steps_ = 0;
  std::map<std::string, AdamMoments> moments_;
};

}  // namespace glm

#endif  // GLM_TRAINING_ADAMW_H_
