// NumPy .npy files (format version 1.0) of float32 arrays, written atomically,
// so `glmctl model forward` output loads with numpy.load.
#ifndef GLM_CLI_NPY_WRITER_H_
#define GLM_CLI_NPY_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace glm {

// The whole file: magic, version, header dict padded to 64 bytes, data.
std::string EncodeNpyFloat32(const std::vector<int64_t>& shape,
                             const std::vector<float>& values);

absl::Status WriteNpyFloat32(const std::string& path,
                             const std::vector<int64_t>& shape,
                             const std::vector<float>& values);

}  // namespace glm

#endif  // GLM_CLI_NPY_WRITER_H_
