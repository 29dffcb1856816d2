#include "training/lora_targets.h"

#include "absl/strings/match.h"

namespace glm {

std::string LoraModuleOf(const std::string& name,
                         const std::vector<int64_t>& whole_shape,
                         bool trainable) {
  constexpr absl::string_view kWeightSuffix = ".weight";
  if (!trainable || whole_shape.size() != 2 ||
      !absl::EndsWith(name, kWeightSuffix)) {
    return "";
  }
  const std::string stem = name.substr(0, name.size() - kWeightSuffix.size());
  return stem.substr(stem.rfind('.') + 1);
}

}  // namespace glm
