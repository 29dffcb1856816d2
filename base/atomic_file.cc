#include "base/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string temp_path, std::FILE* file)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), file_(file) {}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(
    const std::string& path) {
  std::string temp_path = absl::StrCat(path, ".tmp.", getpid());
  std::FILE* file = std::fopen(temp_path.c_str(), "wb");
  if (file == nullptr) return ErrnoError("cannot create", temp_path);
  return std::unique_ptr<AtomicFile>(
      new AtomicFile(path, std::move(temp_path), file));
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
}

absl::Status AtomicFile::Append(const void* data, size_t size) {
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
    return ErrnoError("cannot write", temp_path_);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) {
    return ErrnoError("cannot flush", temp_path_);
  }
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) return ErrnoError("cannot close", temp_path_);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return ErrnoError("cannot rename to", path_);
  }
  committed_ = true;
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents) {
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  if (absl::Status status = (*file)->Append(contents); !status.ok()) {
    return status;
  }
  return (*file)->Commit();
}

}  // namespace glm
