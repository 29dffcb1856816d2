#include "cli/npy_writer.h"

#include <cassert>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"

namespace glm {

std::string EncodeNpyFloat32(const std::vector<int64_t>& shape,
                             const std::vector<float>& values) {
  // A 1-tuple needs its trailing comma: (5,).
  const std::string dims = shape.size() == 1 ? absl::StrCat(shape[0], ",")
                                             : absl::StrJoin(shape, ", ");
  std::string header = absl::StrCat(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // magic(6) + version(2) + length(2) + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  // x86-64 and every platform we build for is little-endian, as '<f4' says.
  out.append(reinterpret_cast<const char*>(values.data()),
             values.size() * sizeof(float));
  return out;
}

absl::Status WriteNpyFloat32(const std::string& path,
                             const std::vector<int64_t>& shape,
                             const std::vector<float>& values) {
  return WriteFileAtomically(path, EncodeNpyFloat32(shape, values));
}

}  // namespace glm
