// Shared pieces of the model tests: a tiny configuration with every layer kind,
// and a directional finite-difference check of analytic gradients.
#ifndef GLM_MODEL_TEST_MODEL_UTIL_H_
#define GLM_MODEL_TEST_MODEL_UTIL_H_

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "model/config.h"
#include "model/parameters.h"

namespace glm {

// 4 layers: layer 1 dense, 2-4 MoE (2 groups of 2 experts, top-2); index
// sharing with frequency 2 and offset 2, so layers 1, 2, 4 compute top-k and
// layer 3 skips; index_topk 3 (shorter than the test sequences); one MTP layer.
ModelConfig TinyTestConfig();

Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937& rng,
                    float std = 1.f);

// Every gradient of `params` (host tensors), in Named() order.
std::vector<std::vector<float>> GradientValues(ModelParameters& params);

// A tensor whose analytic gradient is to be checked.
struct GradientTarget {
  std::string name;
  Tensor* value;
  const Tensor* grad;
};

// For each target: draws a random direction v and compares the directional
// derivative of L along v, by finite differences, with grad . v: Richardson's
// central estimate (4 D(h/2) - D(h)) / 3 with D(h) = (L(x + h v) - L(x - h
// v)) / 2h, error O(h^4). Fails the test when |fd - analytic| > tol *
// max(|fd|, |analytic|) + abs_tol + the float rounding of the loss
// differences (|L| FLT_EPSILON per evaluation, divided by the step). `loss`
// must recompute the loss from the current values.
//
// The model is piecewise smooth: top-k key choices and expert routing are
// discrete, and a difference quotient across a switch means nothing.
// `same_decisions` (optional, called right after each loss evaluation) says
// whether the choices equal those at the unperturbed point x. When the probes
// of one side changed them, the other side's one-sided second-order estimate
// is used; when both sides did, the step is retried at eps / 4 and eps / 16;
// then the direction is skipped and another drawn, up to kDirectionsPerTarget
// per target. Fails the test when a target is never checked or more than
// max(1, targets / 8) directions are skipped in all. Returns the number of
// skipped directions.
inline constexpr int kDirectionsPerTarget = 3;
int ExpectDirectionalGradients(
    const std::function<double()>& loss,
    const std::vector<GradientTarget>& targets, double eps = 1e-3,
    double tol = 2e-2, double abs_tol = 1e-6,
    const std::function<bool()>& same_decisions = nullptr);

}  // namespace glm

#endif  // GLM_MODEL_TEST_MODEL_UTIL_H_
