// Collectives over NCCL, for GPU workers: buffers are device memory, work runs
// on the group's stream, and each call returns once its work has finished,
// except queued exchanges (QueueAllToAllV), which events order against the
// caller's stream, and sends (StartSend), which their Wait finishes. Any thread
// may call a group (one at a time): each call makes the group's GPU current on
// it. The communicator is non-blocking so that a missing or failed peer ends a
// call after the timeout (the communicator is then aborted) instead of hanging.
#ifndef GLM_PARALLEL_NCCL_COLLECTIVES_H_
#define GLM_PARALLEL_NCCL_COLLECTIVES_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/collectives.h"
#include "parallel/key_value_store.h"
#include "parallel/ordered_work_watch.h"

namespace glm {

// Groups on GPU `device` (made current first), connected through `store`
// (not owned; it must outlive the factory).
CollectivesFactory NcclFactory(KeyValueStore* store, absl::Duration timeout,
                               int device);

// GPU `device`'s UUID ("GPU-" and 32 hex digits, as nvidia-smi prints it):
// the same GPU seen by two processes has one.
absl::StatusOr<std::string> GpuUuid(int device);

class NcclCollectives : public Collectives {
 public:
  // Member 0 makes the group's NCCL unique id and publishes it in `store`
  // under `key`; the others wait for it up to `timeout`.
  static absl::StatusOr<std::unique_ptr<NcclCollectives>> Connect(
      KeyValueStore& store, const std::string& key, int rank, int size,
      absl::Duration timeout);
  ~NcclCollectives() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  BufferPlace buffer_place() const override { return BufferPlace::kDevice; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduceSum(int64_t* data, int64_t count) override;
  absl::Status Broadcast(float* data, int64_t count, int root) override;
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                             ReduceOp op) override;
  absl::Status AllToAllV(const float* in,
                         const std::vector<int64_t>& send_counts, float* out,
                         const std::vector<int64_t>& recv_counts) override;
  bool queues_on_device() const override { return true; }
  // On the group's stream, after an event recorded on `queue` (a
  // cudaStream_t) and before an event `queue` waits for: no host wait. A
  // watch thread polls each queued exchange and aborts the communicator
  // when one fails or is still running after the group's timeout.
  absl::Status QueueAllToAllV(const float* in,
                              const std::vector<int64_t>& send_counts,
                              float* out,
                              const std::vector<int64_t>& recv_counts,
                              void* queue) override;
  absl::Status QueuedFailure() override;
  // Queues the send on the group's stream and returns; Wait waits for it
  // (up to the group's timeout from the start). NCCL runs a stream's work in
  // order and a send waits for its receiver, so a receive on this group
  // waits behind the sends queued before it: callers that receive while
  // their sends are pending give each direction a group of its own
  // (parallel/pipeline_edges.h).
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float* data,
                                                         int64_t count,
                                                         int peer) override;
  absl::Status Recv(float* data, int64_t count, int peer) override;
  absl::Status Barrier() override;

 private:
  NcclCollectives(std::string name, ncclComm_t comm, cudaStream_t stream,
                  float* scratch, int device, int rank, int size,
                  absl::Duration timeout);

  // Makes the group's GPU current, queues `what` (enqueue's NCCL calls) and
  // checks their result, then waits for the stream (and the communicator) to
  // finish; on timeout or error aborts the communicator.
  absl::Status Run(const char* what,
                   const std::function<ncclResult_t()>& enqueue);
  // Under mu_: an error naming `what` if the communicator was aborted, else
  // the group's GPU made current.
  absl::Status UsableLocked(const char* what);
  // Under mu_: waits until `query` (a stream's or event's) leaves
  // cudaErrorNotReady, the communicator reports an error or `deadline`
  // passes; on error or timeout aborts the communicator.
  absl::Status FinishLocked(const char* what, ncclResult_t state,
                            absl::Time deadline,
                            const std::function<cudaError_t()>& query);
  absl::Status CheckCounts(const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts) const;
  // The sends and receives of an all-to-all, grouped, on the group's stream.
  ncclResult_t EnqueueAllToAllV(const float* in,
                                const std::vector<int64_t>& send_counts,
                                float* out,
                                const std::vector<int64_t>& recv_counts);
  // A queued exchange's state (`done` recorded after it), for the watch.
  absl::StatusOr<bool> PollQueued(cudaEvent_t done);
  // Aborts the communicator (under mu_) once.
  void AbortLocked();
  // The watch's verdict on a queued exchange.
  void GiveUp(const absl::Status& why);
  OrderedWorkWatch& Watch();

  const std::string name_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  float* scratch_;  // one device float for Barrier
  const int device_;
  const int rank_, size_;
  const absl::Duration timeout_;
  // Guards the communicator against the watch thread's polls and abort.
  std::mutex mu_;
  bool aborted_ = false;
  absl::Status queued_failure_;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's queue
  int64_t queued_ = 0;           // exchanges queued so far, to name them
  // Made with the first queued exchange; the destructor stops it first.
  std::unique_ptr<OrderedWorkWatch> watch_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_NCCL_COLLECTIVES_H_
