#include "kernels/cuda/bf16_weight_copies.h"

#include <cassert>
#include <cstdint>
#include <iterator>

#include "kernels/bf16_copy_layout.h"
#include "kernels/cuda/bf16_copy.cuh"

namespace glm::cuda {
namespace {

static_assert(sizeof(__nv_bfloat16) == kBf16CopyElementBytes,
              "the layout counts bf16 elements");

bool SameSpans(const std::vector<ConstFloatSpan>& a,
               const std::vector<ConstFloatSpan>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].data != b[i].data || a[i].size != b[i].size) return false;
  }
  return true;
}

}  // namespace

void Bf16WeightCopies::Place(Allocator* allocator,
                             const std::vector<ConstFloatSpan>& spans) {
  std::vector<int64_t> sizes;
  sizes.reserve(spans.size());
  for (const ConstFloatSpan& span : spans) sizes.push_back(span.size);
  const Bf16CopyLayout layout = LayOutBf16Copies(sizes);
  buffer_ = layout.bytes == 0
                ? DeviceBuffer()
                : DeviceBuffer(allocator, static_cast<size_t>(layout.bytes));
  by_start_.clear();
  auto* copies = static_cast<__nv_bfloat16*>(buffer_.data());
  for (size_t i = 0; i < spans.size(); ++i) {
    const ConstFloatSpan& span = spans[i];
    if (span.size == 0) continue;
    const bool placed =
        by_start_
            .emplace(span.data,
                     Placed{span.data + span.size, copies + layout.offsets[i]})
            .second;
    assert(placed && "spans must not repeat");
    (void)placed;
  }
  spans_ = spans;
}

void Bf16WeightCopies::Refresh(CudaContext& ctx, Allocator* allocator,
                               const std::vector<ConstFloatSpan>& spans) {
  if (!SameSpans(spans, spans_)) Place(allocator, spans);
  for (const auto& [start, placed] : by_start_) {
    const int64_t size = placed.end - start;
    PackBf16(ctx, ConstMatrixView(start, 1, size, size), nullptr, 1,
             placed.copy, size);
  }
}

const __nv_bfloat16* Bf16WeightCopies::Find(ConstMatrixView v) const {
  return Locate(v);
}

__nv_bfloat16* Bf16WeightCopies::CopyOf(ConstFloatSpan values) const {
  return Locate(ConstMatrixView(values.data, 1, values.size, values.size));
}

__nv_bfloat16* Bf16WeightCopies::Locate(ConstMatrixView v) const {
  if (v.empty() || v.rows == 0 || by_start_.empty()) return nullptr;
  auto it = by_start_.upper_bound(v.data);
  if (it == by_start_.begin()) return nullptr;
  it = std::prev(it);
  const float* last_end = v.data + (v.rows - 1) * v.stride + v.cols;
  if (last_end > it->second.end) return nullptr;
  return it->second.copy + (v.data - it->first);
}

}  // namespace glm::cuda
