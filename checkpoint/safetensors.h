// Safetensors files (the Hugging Face weight format) and sharded folders.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets":
// [begin, end]}, ...} padded with spaces to a multiple of 8, then the data
// section; offsets are relative to the data section. Tensors cover the data
// section exactly, without gaps or overlaps. A sharded folder has
// model.safetensors.index.json {"metadata": {"total_size"}, "weight_map":
// {name: file}}; an unsharded one has model.safetensors.
//
// Reading maps the file (no copy of the whole file in memory); tensors come
// out as raw bytes (for bitwise round trips) or as float32.
#ifndef GLM_CHECKPOINT_SAFETENSORS_H_
#define GLM_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace glm {

enum class DType { kF32, kF16, kBF16, kI64, kI32, kI8, kU8, kBool };

// "F32", "BF16", ... as safetensors spells them.
const char* DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(std::string_view name);
int64_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;

  int64_t NumElements() const;
  uint64_t NumBytes() const { return end - begin; }
};

// "[2, 3]".
std::string ShapeString(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps `path` and validates its header: every error names the file and,
  // where there is one, the tensor.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In data order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;

  // The tensor's bytes as stored (a view into the mapped file).
  absl::StatusOr<std::string_view> Bytes(const std::string& name) const;
  // F32, BF16 and F16 tensors as float32; other dtypes are an error.
  absl::StatusOr<std::vector<float>> ReadFloat32(const std::string& name) const;

 private:
  SafetensorsFile(std::string path, const char* map, size_t size);

  std::string path_;
  const char* map_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// Converts `count` values of a float dtype (F32, BF16, F16) to float32.
absl::Status ConvertToFloat32(DType dtype, const char* bytes, int64_t count,
                              float* out);

// One tensor to write: its bytes must be NumElements(shape) * DTypeSize.
struct TensorBytes {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string_view bytes;
};

// Writes a safetensors file atomically (temporary file, then rename), tensors
// in the given order. Names must be unique.
absl::Status WriteSafetensors(
    const std::string& path, const std::vector<TensorBytes>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// A folder of safetensors files: model.safetensors, or shards listed by
// model.safetensors.index.json. Opening validates every shard and that the
// index and the shards agree exactly.
class SafetensorsFolder {
 public:
  static absl::StatusOr<SafetensorsFolder> Open(const std::string& dir);

  // Sorted.
  std::vector<std::string> TensorNames() const;
  const TensorInfo* Find(const std::string& name) const;
  // The shard holding `name`; nullptr when absent.
  const SafetensorsFile* FileOf(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const {
    return files_;
  }
  bool sharded() const { return sharded_; }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;
  bool sharded_ = false;
};

inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";
inline constexpr char kSafetensorsSingleName[] = "model.safetensors";

// Writes model.safetensors.index.json (atomically) mapping each tensor to the
// file name (relative to `dir`) that holds it.
absl::Status WriteSafetensorsIndex(
    const std::string& dir,
    const std::map<std::string, std::string>& weight_map, uint64_t total_size);

// Writes `tensors` into `dir` as model.safetensors when they fit in
// `max_shard_bytes`, else as model-0000i-of-0000n.safetensors shards plus the
// index (tensors kept whole and in order).
absl::Status WriteSafetensorsFolder(const std::string& dir,
                                    const std::vector<TensorBytes>& tensors,
                                    uint64_t max_shard_bytes);

}  // namespace glm

#endif  // GLM_CHECKPOINT_SAFETENSORS_H_
