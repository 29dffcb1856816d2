// Error checks after every CUDA runtime and cuBLASLt call and kernel launch.
#ifndef GLM_KERNELS_CUDA_CUDA_CHECK_H_
#define GLM_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
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

// After every cuBLASLt call.
#define GLM_CUBLAS_CHECK(expr)                                            \
  do {                                                                    \
    cublasStatus_t glm_cublas_status = (expr);                            \
    if (glm_cublas_status != CUBLAS_STATUS_SUCCESS) {                     \
      std::fprintf(stderr, "cuBLAS error %s at %s:%d: %s\n",              \
                   cublasLtGetStatusName(glm_cublas_status), __FILE__,    \
                   __LINE__, cublasLtGetStatusString(glm_cublas_status)); \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define GLM_CUDA_CHECK_LAUNCH() GLM_CUDA_CHECK(cudaGetLastError())

#endif  // GLM_KERNELS_CUDA_CUDA_CHECK_H_
