#include "parallel/collectives.h"

namespace glm {

absl::Status Collectives::AllToAll(const float* in, int64_t count, float* out) {
  const std::vector<int64_t> counts(size(), count);
  return AllToAllV(in, counts, out, counts);
}

}  // namespace glm
