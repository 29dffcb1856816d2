// The backend for a device named as the worker and the CLI name it: "cpu", or
// "cuda:N" for GPU N. CUDA devices need a build with --config=cuda; without
// it they are an error that says so.
#ifndef GLM_KERNELS_BACKEND_FACTORY_H_
#define GLM_KERNELS_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/attention_pairs.h"
#include "kernels/backend.h"

namespace glm {

struct DeviceDescription {
  std::string name;          // "cpu", or the GPU's product name
  int64_t memory_bytes = 0;  // the GPU's memory; 0 on the CPU
};

// The N of a device named "cuda:N" (an error for any other name).
absl::StatusOr<int> CudaOrdinal(const std::string& device);

// The CUDA devices this process sees (an error naming why when none can be
// used, or in a build without CUDA).
absl::StatusOr<int> CudaDeviceCount();

// Checks that `device` exists here and describes it.
absl::StatusOr<DeviceDescription> DescribeDevice(const std::string& device);

// `precision`: "fp32" (every product in fp32; the only one on the CPU) or
// "bf16" (matrix products round their inputs to bf16, accumulate in fp32);
// empty picks bf16 on a GPU and fp32 on the CPU. `deterministic`: every
// kernel choice a function of the shapes (a job's training.deterministic),
// so that separate processes round alike; else a GPU backend may time
// alternatives on their first call and keep the fastest.
// `attention_pairs_per_call`: what a GPU backend's cuDNN attention takes a
// call where GLM_ATTENTION_PAIRS_PER_CALL is unset (a worker's choice,
// worker/attention_pairs_choice.h); 0: kDefaultAttentionPairsPerCall.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    const std::string& device, const std::string& precision, bool deterministic,
    int64_t attention_pairs_per_call = 0);

// The query-key pairs a CUDA backend's cuDNN attention call takes at most
// (kernels/attention_pairs.h): GLM_ATTENTION_PAIRS_PER_CALL from the
// environment, a whole number of at least 1 (smaller chunks hold less
// scratch: a long sequence then fits a smaller GPU, at some cost in time), or
// `fallback` when unset; an error naming the variable when it is not such a
// number.
absl::StatusOr<int64_t> AttentionPairsPerCall(
    int64_t fallback = kDefaultAttentionPairsPerCall);

}  // namespace glm

#endif  // GLM_KERNELS_BACKEND_FACTORY_H_
