#include "kernels/bf16_copy_layout.h"

namespace glm {
namespace {

constexpr int64_t kAlignElements = kBf16CopyAlignBytes / kBf16CopyElementBytes;

}  // namespace

int64_t Bf16CopyStride(int64_t elements) {
  return (elements + kAlignElements - 1) / kAlignElements * kAlignElements;
}

Bf16CopyLayout LayOutBf16Copies(const std::vector<int64_t>& elements) {
  Bf16CopyLayout layout;
  int64_t next = 0;
  for (int64_t size : elements) {
    layout.offsets.push_back(next);
    next += Bf16CopyStride(size);
  }
  layout.bytes = next * kBf16CopyElementBytes;
  return layout;
}

}  // namespace glm
