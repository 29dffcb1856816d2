// Where a backend computing in bf16 keeps its copies of the weights products
// read (Backend::RefreshComputeCopies; the CUDA backend's
// kernels/cuda/bf16_weight_copies.h): one allocation holding a bf16 copy of
// every span, in the spans' order, each copy starting on 16 bytes. Host code
// with no device of its own (the memory planner, tests) counts the same
// bytes the device allocates.
#ifndef GLM_KERNELS_BF16_COPY_LAYOUT_H_
#define GLM_KERNELS_BF16_COPY_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace glm {

// Bytes of one bf16 element.
inline constexpr int64_t kBf16CopyElementBytes = 2;
// Each copy starts on 16 bytes, as the vectorized packer and TMA loads want.
inline constexpr int64_t kBf16CopyAlignBytes = 16;

// Elements from the start of the copy of a span of `elements` to where the
// next copy starts.
int64_t Bf16CopyStride(int64_t elements);

struct Bf16CopyLayout {
  // Where each span's copy starts, in elements from the allocation's start
  // (a span without elements has no copy: its offset is the next one's).
  std::vector<int64_t> offsets;
  // The allocation's size; 0: no allocation.
  int64_t bytes = 0;
};

// The layout of copies of spans of `elements` each, in that order.
Bf16CopyLayout LayOutBf16Copies(const std::vector<int64_t>& elements);

}  // namespace glm

#endif  // GLM_KERNELS_BF16_COPY_LAYOUT_H_
