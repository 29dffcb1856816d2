// The release every glm binary reports for --version.
#ifndef GLM_VERSION_VERSION_H_
#define GLM_VERSION_VERSION_H_

namespace glm {

inline constexpr char kGlmVersion[] = "0.1.0";

}  // namespace glm

#endif  // GLM_VERSION_VERSION_H_
