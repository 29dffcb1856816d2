// Job specs as a client sends them: JSON through protobuf's mapping (glmctl
// submit -f) or the binary message of a SubmitJob call, then every rule of
// what a job may be. Nothing may crash, and an accepted spec's plan must be
// one the scheduler can assign.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "jobspec/job_spec_validator.h"
#include "proto/job_spec.pb.h"

namespace {

void Validate(const glm::v1::JobSpec& spec) {
  absl::StatusOr<glm::JobPlan> plan = glm::ValidateJobSpec(spec);
  if (!plan.ok()) return;
  if (static_cast<int>(plan->grid.ranks.size()) !=
          spec.parallel().world_size() ||
      plan->stages.empty()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  glm::v1::JobSpec spec;
  if (google::protobuf::util::JsonStringToMessage(bytes, &spec).ok()) {
    Validate(spec);
  }
  spec.Clear();
  if (spec.ParseFromString(bytes)) Validate(spec);
  return 0;
}
