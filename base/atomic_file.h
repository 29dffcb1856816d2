// A file that appears under its final name only once it is complete: bytes go
// to a temporary file beside it, and Commit() renames it into place. A reader
// never sees a half-written file; a writer that fails leaves nothing behind.
#ifndef GLM_BASE_ATOMIC_FILE_H_
#define GLM_BASE_ATOMIC_FILE_H_

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace glm {

class AtomicFile {
 public:
  // Creates the temporary file for `path` (same directory, so the rename is
  // atomic).
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(
      const std::string& path);
  // Removes the temporary file unless Commit() succeeded.
  ~AtomicFile();

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  absl::Status Append(const void* data, size_t size);
  absl::Status Append(std::string_view bytes) {
    return Append(bytes.data(), bytes.size());
  }
  // Flushes, syncs and renames the temporary file to the final path.
  absl::Status Commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, std::string temp_path, std::FILE* file);

  std::string path_;
  std::string temp_path_;
  std::FILE* file_;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically.
absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents);

}  // namespace glm

#endif  // GLM_BASE_ATOMIC_FILE_H_
