// HF config.json text (model.hf_config_json of a job spec, glmctl model
// --config): parsed or refused within bounds; an accepted config counts its
// parameters without overflow and round-trips through ToHfConfigJson.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<glm::ModelConfig> config = glm::ParseHfConfigJson(text);
  if (!config.ok()) return 0;
  const glm::ParameterCount count = glm::CountParameters(*config);
  absl::StatusOr<glm::ModelConfig> again =
      glm::ParseHfConfigJson(glm::ToHfConfigJson(*config));
  if (count.total <= 0 || !again.ok() ||
      glm::ToHfConfigJson(*again) != glm::ToHfConfigJson(*config)) {
    std::abort();
  }
  return 0;
}
