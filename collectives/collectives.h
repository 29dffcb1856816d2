// Collective communication within one process group. Every member calls the
// same collectives in the same order; Send/Recv pair up in order per peer.
// Buffers are host memory for Gloo and device memory for NCCL (buffer_place).
// Each call fails
// with a status (never hangs) when a peer does not answer within the group's
// timeout.
#ifndef GLM_COLLECTIVES_COLLECTIVES_H_
#define GLM_COLLECTIVES_COLLECTIVES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace glm {

enum class ReduceOp { kSum, kAverage };

// Where a group's buffers live: host memory (Gloo) or the device's (NCCL,
// on the device current when the group was connected).
enum class BufferPlace { kHost, kDevice };

// A send under way; its buffer must stay alive until Wait returns.
class PendingSend {
 public:
  virtual ~PendingSend() = default;
  virtual absl::Status Wait() = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  // This member's index in the group and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where every buffer handed to this group's calls must live
  // (parallel/staged_collectives.h adapts a group to the other place).
  virtual BufferPlace buffer_place() const { return BufferPlace::kHost; }

  // In place: every member ends with the same reduced values.
  virtual absl::Status AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  // In place sum of integers (expert token counts).
  virtual absl::Status AllReduceSum(int64_t* data, int64_t count) = 0;
  // In place: every member ends with `root`'s values.
  virtual absl::Status Broadcast(float* data, int64_t count, int root) = 0;
  // `out` holds size() * count values, member i's `in` at i * count.
  virtual absl::Status AllGather(const float* in, int64_t count,
                                 float* out) = 0;
  // `in` holds size() * count values; member r receives the reduction of
  // every member's block r into `out` (count values).
  virtual absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                                     ReduceOp op) = 0;
  // `in` is send_counts[0] values for member 0, then send_counts[1] for
  // member 1, ...; `out` receives recv_counts[i] values from member i in the
  // same order. Counts must agree pairwise across members.
  virtual absl::Status AllToAllV(const float* in,
                                 const std::vector<int64_t>& send_counts,
                                 float* out,
                                 const std::vector<int64_t>& recv_counts) = 0;
  // Whether this group can queue an exchange on the device its buffers live
  // on (QueueAllToAllV): NCCL's groups.
  virtual bool queues_on_device() const { return false; }
  // AllToAllV ordered on the device instead of the host: the exchange runs
  // after the work queued so far on `queue` (the buffers' device queue, as
  // Allocator::queue names it), work queued on it later runs after the
  // exchange, and the call returns once the exchange is queued. The buffers
  // must stay allocated until then (stream-ordered frees on `queue` do). An
  // exchange that fails, or that a peer leaves unanswered past the group's
  // timeout, aborts the group: its later calls fail, and QueuedFailure says
  // why. Groups without queues_on_device() refuse it.
  virtual absl::Status QueueAllToAllV(const float* in,
                                      const std::vector<int64_t>& send_counts,
                                      float* out,
                                      const std::vector<int64_t>& recv_counts,
                                      void* queue);
  // The failure of a queued exchange found so far; ok while none (an
  // exchange still running may fail later).
  virtual absl::Status QueuedFailure() { return absl::OkStatus(); }
  // AllToAllV with `count` values to and from every member.
  absl::Status AllToAll(const float* in, int64_t count, float* out);
  // Posts a send and returns without waiting for the peer (a pipeline stage
  // keeps several in flight, so that no two stages wait on each other's
  // sends). Sends to one peer are received in the order they were started.
  virtual absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(
      const float* data, int64_t count, int peer) = 0;
  // StartSend, then Wait.
  absl::Status Send(const float* data, int64_t count, int peer);
  virtual absl::Status Recv(float* data, int64_t count, int peer) = 0;
  virtual absl::Status Barrier() = 0;
};

// Connects one group: `key` is unique to the group (the same on all its
// members), `rank` this member's index among `size`.
using CollectivesFactory =
    std::function<absl::StatusOr<std::unique_ptr<Collectives>>(
        const std::string& key, int rank, int size)>;

}  // namespace glm

#endif  // GLM_COLLECTIVES_COLLECTIVES_H_
