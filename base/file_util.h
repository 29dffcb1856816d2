// Small file-system steps: paths, sizes, whole-file reads, mkdir -p.
#ifndef GLM_BASE_FILE_UTIL_H_
#define GLM_BASE_FILE_UTIL_H_

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
// The whole file; NotFound naming the path (and why) when it cannot be
// opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

}  // namespace glm

#endif  // GLM_BASE_FILE_UTIL_H_
