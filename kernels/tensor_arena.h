// Many tensors in one allocation, in host memory or on a device (a model's
// values, its gradients, AdamW's moments; a micro batch's index arrays): one
// allocation instead of hundreds, and one pass (a fill, a copy, a collective)
// over all of them.
#ifndef GLM_KERNELS_TENSOR_ARENA_H_
#define GLM_KERNELS_TENSOR_ARENA_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm {

// The floats of one arena, gaps between its tensors included.
struct ArenaRange {
  Allocator* allocator = nullptr;  // null: host memory
  float* data = nullptr;
  int64_t size = 0;

  bool empty() const { return data == nullptr; }
  // Sets every float of the arena to zero: one fill on the device's stream,
  // or in host memory a range of it on each core.
  void SetZero() const;
};

// The bytes a tensor of `elements` floats takes in an arena, from its start
// to the next tensor's: tensors start at 256-byte boundaries.
int64_t ArenaBytes(int64_t elements);

// `tensors` as few runs of memory as their layout allows, for a collective
// to run on where they lie instead of on a packed copy.
struct TensorSpans {
  // Views of an arena, in the order given: consecutive tensors share a span
  // when the next starts where the arena puts the tensor that follows the
  // previous one (ArenaBytes), so the span covers both and the alignment gap
  // between them. Nothing writes a gap (it keeps the arena's zeros), and an
  // element-wise collective adds gap elements only to each other.
  std::vector<FloatSpan> spans;
  // The tensors that own their storage (an allocation each: LoRA adapters,
  // copies), in order.
  std::vector<Tensor*> owning;
};

// Splits `tensors` (empty ones are left out) into spans and owning tensors.
// Ranks whose tensors have the same shapes and the same placement (views of
// one arena laid out alike, or each its own) get the same span sizes.
TensorSpans SpansOf(const std::vector<Tensor*>& tensors);

// Tensors of `shapes`, zeros, in one allocation of `allocator` (null: host
// memory; each tensor at a 256-byte boundary; a shape without elements gives
// an empty tensor of that shape); the arena lives while any of them does.
// *range (if given) gets its floats. Host memory is zeroed on every core as it
// is first touched, which for billions of elements takes seconds per core.
std::vector<Tensor> ZerosInOneAllocation(
    Allocator* allocator, const std::vector<std::vector<int64_t>>& shapes,
    ArenaRange* range = nullptr);

// `arrays` as [size] index tensors where `allocator` allocates (null: host
// memory), back to back in one allocation sent in one host-to-device copy: a
// micro batch's index arrays go up together instead of one copy each.
std::vector<IndexTensor> UploadIndices(
    Allocator* allocator, const std::vector<std::vector<int32_t>>& arrays);

// UploadIndices into the last call's allocation whenever the arrays' sizes
// repeat: the tensors lie where the last ones did, so work recorded over one
// micro batch's arrays (Backend::Record) reads the next one's. The last
// call's tensors then hold the new values too.
class IndexUploader {
 public:
  std::vector<IndexTensor> Send(
      Allocator* allocator, const std::vector<std::vector<int32_t>>& arrays);

 private:
  std::shared_ptr<const DeviceBuffer> arena_;
  std::vector<size_t> sizes_;
};

}  // namespace glm

#endif  // GLM_KERNELS_TENSOR_ARENA_H_
