// Megatron indexed datasets (data.sources of a job spec): the input's first
// two bytes give the .bin size (its bytes follow), the rest is the .idx. Open
// validates the index against the .bin, after which every sequence reads
// within it.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "fuzz/input_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t bin_size = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  glm::WriteInputFile("input.bin", data + 2, bin_size);
  const std::string idx = glm::WriteInputFile("input.idx", data + 2 + bin_size,
                                              size - 2 - bin_size);
  const std::string prefix = idx.substr(0, idx.size() - 4);
  absl::StatusOr<std::unique_ptr<glm::IndexedDataset>> dataset =
      glm::IndexedDataset::Open(prefix);
  if (!dataset.ok()) return 0;
  for (int64_t i = 0; i < (*dataset)->sequence_count(); ++i) {
    const std::vector<int32_t> tokens = (*dataset)->Sequence(i);
    (void)tokens;
  }
  return 0;
}
