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
    // Touches every byte: one outside the mapping would fault. The sum goes
    // to a volatile so the reads are not optimized away.
    char sum = 0;
    for (char byte : bytes.value_or("")) sum ^= byte;
    volatile char sink = sum;
    (void)sink;
    (void)(*file)->ReadFloat32(tensor.name);
  }
  return 0;
}
