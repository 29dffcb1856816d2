#include "base/file_util.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace glm {

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("missing file ", path));
  }
  return static_cast<int64_t>(info.st_size);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status MakeDirectories(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (FileExists(prefix)) continue;
    if (mkdir(prefix.c_str(), 0755) != 0) {
      // The reason (EACCES, ENOSPC, ...) is read before FileExists can
      // overwrite errno; a directory another process made meanwhile is fine.
      const int reason = errno;
      if (FileExists(prefix)) continue;
      return absl::InternalError(
          absl::StrCat("cannot create ", prefix, ": ", std::strerror(reason)));
    }
  }
  return absl::OkStatus();
}

}  // namespace glm
