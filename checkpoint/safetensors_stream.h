// Writing a safetensors file one tensor at a time.
//
// WriteSafetensors (safetensors.h) needs every tensor's bytes at once; a
// checkpoint conversion that assembles tensors (an expert tensor split over
// ranks) or reads them from memory-mapped files would then hold a whole shard.
// Here the header is built from names, dtypes and shapes alone, and each
// tensor's bytes are fetched, appended and handed back in turn, so memory
// stays at one tensor.
#ifndef GLM_CHECKPOINT_SAFETENSORS_STREAM_H_
#define GLM_CHECKPOINT_SAFETENSORS_STREAM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/safetensors.h"

namespace glm {

struct TensorHeader {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// The bytes of tensor `index`: a view that stays valid until the next call,
// optionally built in `scratch`.
using TensorFetcher = std::function<absl::StatusOr<std::string_view>(
    size_t index, std::string* scratch)>;

// Called with each tensor's bytes once they are in the file (to hash them or
// release their pages); the bytes stay valid during the call.
using TensorWritten = std::function<void(size_t index, std::string_view bytes)>;

// Writes `path` atomically (temporary file, then rename). Each fetched tensor
// must have exactly the bytes its dtype and shape need; `written` (optional)
// sees it after it is appended, then a scratch buffer is freed.
absl::Status WriteSafetensorsStreamed(
    const std::string& path, const std::vector<TensorHeader>& tensors,
    const std::map<std::string, std::string>& metadata,
    const TensorFetcher& fetch, const TensorWritten& written = nullptr);

// Gives the pages of a read-only file mapping under `bytes` back to the
// kernel (whole pages inside the range only); the mapping stays valid and
// reads the file again when touched. Keeps the resident set of a streaming
// pass over mapped checkpoint files near one tensor.
void ReleasePages(std::string_view bytes);

}  // namespace glm

#endif  // GLM_CHECKPOINT_SAFETENSORS_STREAM_H_
