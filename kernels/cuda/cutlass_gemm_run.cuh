// Running a CUTLASS device-level GEMM (cutlass::gemm::device::
// GemmUniversalAdapter) whose arguments are set: can_implement, initialize
// (with its workspace) and run on a stream, each step checked; a failure
// aborts naming the GEMM and the step. Shared by the kernels built on
// CUTLASS (the grouped expert GEMMs, the attention's products).
#ifndef GLM_KERNELS_CUDA_CUTLASS_GEMM_RUN_CUH_
#define GLM_KERNELS_CUDA_CUTLASS_GEMM_RUN_CUH_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cutlass/cutlass.h"
#include "kernels/cuda/cuda_check.h"

namespace glm::cuda {

inline void CheckCutlass(cutlass::Status status, const char* gemm,
                         const char* step) {
  if (status != cutlass::Status::kSuccess) {
    std::fprintf(stderr, "CUTLASS %s %s failed: %s\n", gemm, step,
                 cutlassGetStatusString(status));
    std::abort();
  }
}

template <typename Gemm>
void RunCutlassGemm(const char* gemm_name, const typename Gemm::Arguments& args,
                    void* workspace, cudaStream_t stream) {
  Gemm gemm;
  CheckCutlass(gemm.can_implement(args), gemm_name, "can_implement");
  CheckCutlass(gemm.initialize(args, workspace, stream), gemm_name,
               "initialize");
  CheckCutlass(gemm.run(stream), gemm_name, "run");
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CUTLASS_GEMM_RUN_CUH_
