// Safetensors files (HF checkpoints a job starts from, glmctl convert): the
// header is validated on open, after which every tensor's bytes lie inside
// the file and the float ones convert.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "fuzz/input_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = glm::WriteInputFile("input.safetensors", data, size);
  absl::StatusOr<std::unique_ptr<glm::SafetensorsFile>> file =
      glm::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const glm::TensorInfo& tensor : (*file)->tensors()) {
    absl::StatusOr<std::string_view> bytes = (*file)->Bytes(tensor.name);
    // Touches every byte: one outside the mapping would fault.
    volatile char last = 0;
    for (char byte : bytes.value_or("")) last = byte;
    (void)(*file)->ReadFloat32(tensor.name);
  }
  return 0;
}
