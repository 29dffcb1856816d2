// Choosing among interchangeable kernels for one call (cuDNN's attention
// plans, cuBLASLt's product algorithms) by timing each on the call's own
// operands, the library's first choice first.
#ifndef GLM_KERNELS_CUDA_TIMED_CHOICE_H_
#define GLM_KERNELS_CUDA_TIMED_CHOICE_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace glm::cuda {

// Whether `stream`'s work is being captured into a graph: timing waits for
// the device, which a capture cannot.
inline bool StreamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GLM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

// Milliseconds of each of `count` candidates on `stream`, the best of three
// timed runs. runnable(i) runs candidate i once, untimed, and says whether it
// could (one that cannot is left out: -1); run(i) runs it again, checking
// its own errors.
template <typename Runnable, typename Run>
std::vector<float> TimeCandidates(cudaStream_t stream, size_t count,
                                  const Runnable& runnable, const Run& run) {
  cudaEvent_t start, stop;
  GLM_CUDA_CHECK(cudaEventCreate(&start));
  GLM_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(count, -1.f);
  for (size_t i = 0; i < count; ++i) {
    if (!runnable(i)) continue;
    float best = 0.f;
    for (int repeat = 0; repeat < 3; ++repeat) {
      GLM_CUDA_CHECK(cudaEventRecord(start, stream));
      run(i);
      GLM_CUDA_CHECK(cudaEventRecord(stop, stream));
      GLM_CUDA_CHECK(cudaEventSynchronize(stop));
      float t = 0.f;
      GLM_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      best = repeat == 0 ? t : std::min(best, t);
    }
    ms[i] = best;
  }
  GLM_CUDA_CHECK(cudaEventDestroy(start));
  GLM_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

// The candidate to keep: the fastest where it runs in under `margin` times
// candidate 0's time (or candidate 0 could not run), else candidate 0, so
// that timing noise between processes seldom picks another kernel.
inline size_t PickCandidate(const std::vector<float>& ms, float margin) {
  size_t fastest = 0;
  for (size_t i = 1; i < ms.size(); ++i) {
    if (ms[i] >= 0 && (fastest == 0 || ms[i] < ms[fastest])) fastest = i;
  }
  if (fastest > 0 && (ms[0] < 0 || ms[fastest] < margin * ms[0])) {
    return fastest;
  }
  return 0;
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_TIMED_CHOICE_H_
