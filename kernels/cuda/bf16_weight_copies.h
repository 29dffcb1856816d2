// bf16 copies of the weights the bf16 mode's products read, so that a product
// with a weight operand reads its copy instead of converting the fp32 master
// weight on every call (each weight is read by a forward and a backward per
// micro batch, but changes once per optimizer step).
//
// The copies sit in one device allocation, laid out like the spans they copy:
// any view inside a span (a slab of stacked experts, a range of rows or
// columns) has a copy at the same offset with the same strides. Where each
// copy starts and the allocation's size are kernels/bf16_copy_layout.h's,
// which host code (the memory planner) counts with.
#ifndef GLM_KERNELS_CUDA_BF16_WEIGHT_COPIES_H_
#define GLM_KERNELS_CUDA_BF16_WEIGHT_COPIES_H_

#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm::cuda {

class Bf16WeightCopies {
 public:
  // Copies `spans` (device memory) now. The copies replace the last call's;
  // the allocation is kept when the spans are the same.
  void Refresh(CudaContext& ctx, Allocator* allocator,
               const std::vector<ConstFloatSpan>& spans);
  // The copy of `v`, or null when `v` does not lie inside one span.
  const __nv_bfloat16* Find(ConstMatrixView v) const;
  // The copy of `values` for an op that writes it as it updates them (the
  // optimizer), or null as Find.
  __nv_bfloat16* CopyOf(ConstFloatSpan values) const;

 private:
  // A span's end and where its copy starts.
  struct Placed {
    const float* end;
    __nv_bfloat16* copy;
  };

  void Place(Allocator* allocator, const std::vector<ConstFloatSpan>& spans);
  __nv_bfloat16* Locate(ConstMatrixView v) const;

  std::vector<ConstFloatSpan> spans_;
  DeviceBuffer buffer_;
  std::map<const float*, Placed> by_start_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_BF16_WEIGHT_COPIES_H_
