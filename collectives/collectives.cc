#include "collectives/collectives.h"

namespace glm {

absl::Status Collectives::AllToAll(const float* in, int64_t count, float* out) {
  const std::vector<int64_t> counts(size(), count);
  return AllToAllV(in, counts, out, counts);
}

absl::Status Collectives::QueueAllToAllV(
    const float* /*in*/, const std::vector<int64_t>& /*send_counts*/,
    float* /*out*/, const std::vector<int64_t>& /*recv_counts*/,
    void* /*queue*/) {
  return absl::FailedPreconditionError(
      "this group does not queue exchanges on a device (its buffers are the "
      "host's)");
}

absl::Status Collectives::Send(const float* data, int64_t count, int peer) {
  absl::StatusOr<std::unique_ptr<PendingSend>> pending =
      StartSend(data, count, peer);
  if (!pending.ok()) return pending.status();
  return (*pending)->Wait();
}

}  // namespace glm
