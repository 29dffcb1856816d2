#include "fuzz/input_files.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace glm {
namespace {

const std::string& Folder() {
  static const std::string* folder = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
        "/glm-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return new std::string(pattern);
  }();
  return *folder;
}

}  // namespace

std::string WriteInputFile(const std::string& name, const uint8_t* data,
                           size_t size) {
  const std::string path = Folder() + "/" + name;
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr || std::fwrite(data, 1, size, file) != size ||
      std::fclose(file) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace glm
