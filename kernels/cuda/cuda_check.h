// Error checks after every CUDA runtime call and kernel launch.
#ifndef GLM_KERNELS_CUDA_CUDA_CHECK_H_
#define GLM_KERNELS_CUDA_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define GLM_CUDA_CHECK(expr)                                              \
  do {                                                                    \
    cudaError_t glm_cuda_status = (expr);                                 \
    if (glm_cuda_status != cudaSuccess) {                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n",                \
                   cudaGetErrorName(glm_cuda_status), __FILE__, __LINE__, \
                   cudaGetErrorString(glm_cuda_status));                  \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define GLM_CUDA_CHECK_LAUNCH() GLM_CUDA_CHECK(cudaGetLastError())

#endif  // GLM_KERNELS_CUDA_CUDA_CHECK_H_
