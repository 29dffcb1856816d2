// Fuzz inputs for parsers that read files: the bytes written under a fixed
// name in a private folder, rewritten for each input.
#ifndef GLM_FUZZ_INPUT_FILES_H_
#define GLM_FUZZ_INPUT_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace glm {

// The path of `name` in this process's folder (made once, under $TMPDIR or
// /tmp) after writing `size` bytes of `data` to it.
std::string WriteInputFile(const std::string& name, const uint8_t* data,
                           size_t size);

}  // namespace glm

#endif  // GLM_FUZZ_INPUT_FILES_H_
