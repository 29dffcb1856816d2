#include "checkpoint/safetensors_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

uint64_t NumBytes(const TensorHeader& tensor) {
  int64_t count = 1;
  for (int64_t dim : tensor.shape) count *= dim;
  return static_cast<uint64_t>(count * DTypeSize(tensor.dtype));
}

// The 8-byte little-endian length, then the JSON header padded with spaces
// to a multiple of 8.
std::string HeaderBytes(const std::vector<TensorHeader>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorHeader& tensor : tensors) {
    const uint64_t end = offset + NumBytes(tensor);
    header[tensor.name] = {{"dtype", DTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  }
  return bytes + json;
}

}  // namespace

absl::Status WriteSafetensorsStreamed(
    const std::string& path, const std::vector<TensorHeader>& tensors,
    const std::map<std::string, std::string>& metadata,
    const TensorFetcher& fetch, const TensorWritten& written) {
  std::map<std::string, int> seen;
  for (const TensorHeader& tensor : tensors) {
    if (tensor.name == "__metadata__" || seen[tensor.name]++ > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", tensor.name, "' used twice"));
    }
  }
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  absl::Status status = (*file)->Append(HeaderBytes(tensors, metadata));
  std::string scratch;
  for (size_t i = 0; i < tensors.size() && status.ok(); ++i) {
    absl::StatusOr<std::string_view> bytes = fetch(i, &scratch);
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() != NumBytes(tensors[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", tensors[i].name, "' ",
          ShapeString(tensors[i].shape), " of ", DTypeName(tensors[i].dtype),
          " needs ", NumBytes(tensors[i]), " bytes, got ", bytes->size()));
    }
    status = (*file)->Append(*bytes);
    if (status.ok() && written) written(i, *bytes);
    if (bytes->data() == scratch.data()) {
      std::string().swap(scratch);  // free it: the next tensor may be smaller
    }
  }
  if (status.ok()) status = (*file)->Commit();
  return status;
}

void ReleasePages(std::string_view bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t begin = (start + page - 1) & ~(page - 1);
  const uintptr_t end = (start + bytes.size()) & ~(page - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

}  // namespace glm
