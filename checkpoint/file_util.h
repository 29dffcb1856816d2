// Small file-system steps the checkpoint code shares.
#ifndef GLM_CHECKPOINT_FILE_UTIL_H_
#define GLM_CHECKPOINT_FILE_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace glm {

// "dir/name" (no doubled slash).
std::string JoinPath(const std::string& dir, const std::string& name);
bool FileExists(const std::string& path);
// NotFound naming the path when it does not exist.
absl::StatusOr<int64_t> FileSize(const std::string& path);
// The whole file; NotFound naming the path when it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

}  // namespace glm

#endif  // GLM_CHECKPOINT_FILE_UTIL_H_
