#include "parallel/nccl_collectives.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

ncclRedOp_t ToNccl(ReduceOp op) {
  return op == ReduceOp::kAverage ? ncclAvg : ncclSum;
}

absl::Status NcclError(const std::string& group, const char* what,
                       ncclResult_t result) {
  return absl::InternalError(absl::StrCat(
      "group ", group, ": ", what, " failed: ", ncclGetErrorString(result),
      " (", ncclGetLastError(nullptr), ")"));
}

// Polls a non-blocking communicator until its pending operation (init or
// enqueue) settles or `deadline` passes.
ncclResult_t SettleComm(ncclComm_t comm, absl::Time deadline) {
  ncclResult_t state = ncclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess &&
         state == ncclInProgress && absl::Now() < deadline) {
    std::this_thread::yield();
  }
  return state;
}

// Member 0 makes a unique id and publishes it under `id_key`; the others
// wait for it (at most `timeout`).
absl::StatusOr<ncclUniqueId> ShareUniqueId(KeyValueStore& store,
                                           const std::string& id_key,
                                           const std::string& group, int rank,
                                           absl::Duration timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return NcclError(group, "making the unique id", r);
    }
    absl::Status set =
        store.Set(id_key, std::string(id.internal, sizeof(id.internal)));
    if (!set.ok()) return set;
    return id;
  }
  absl::StatusOr<std::vector<std::string>> value =
      store.Wait({id_key}, timeout);
  if (!value.ok()) {
    return absl::Status(
        value.status().code(),
        absl::StrCat("group ", group,
                     ": waiting for member 0: ", value.status().message()));
  }
  if ((*value)[0].size() != sizeof(id.internal)) {
    return absl::DataLossError(absl::StrCat("group ", group,
                                            ": NCCL unique id has ",
                                            (*value)[0].size(), " bytes"));
  }
  std::copy((*value)[0].begin(), (*value)[0].end(), id.internal);
  return id;
}

}  // namespace

CollectivesFactory NcclFactory(KeyValueStore* store, absl::Duration timeout,
                               int device) {
  return [store, timeout, device](
             const std::string& key, int rank,
             int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
    // The communicator and its stream belong to the current device.
    if (const cudaError_t set = cudaSetDevice(device); set != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group ", key, ": GPU ", device, ": ", cudaGetErrorString(set)));
    }
    absl::StatusOr<std::unique_ptr<NcclCollectives>> group =
        NcclCollectives::Connect(*store, key, rank, size, timeout);
    if (!group.ok()) return group.status();
    return std::unique_ptr<Collectives>(*std::move(group));
  };
}

absl::StatusOr<std::string> GpuUuid(int device) {
  cudaDeviceProp properties;
  if (const cudaError_t got = cudaGetDeviceProperties(&properties, device);
      got != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", device, ": ", cudaGetErrorString(got)));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
    const auto byte = static_cast<unsigned char>(properties.uuid.bytes[i]);
    uuid += kHex[byte >> 4];
    uuid += kHex[byte & 15];
  }
  return uuid;
}

absl::StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Connect(
    KeyValueStore& store, const std::string& key, int rank, int size,
    absl::Duration timeout) {
  // A non-blocking communicator bounds the wait for members to join, but
  // every call on one costs 50-180 us more than on a blocking one
  // (bench/NOTES.md). So the members first join a non-blocking one (the
  // timeout applies), then, all present, make the blocking one the calls use
  // (Run still bounds each call's wait: it polls the stream and aborts).
  absl::StatusOr<ncclUniqueId> join_id =
      ShareUniqueId(store, key + "/nccl_unique_id/join", key, rank, timeout);
  if (!join_id.ok()) return join_id.status();
  ncclConfig_t non_blocking = NCCL_CONFIG_INITIALIZER;
  non_blocking.blocking = 0;
  ncclComm_t joined = nullptr;
  ncclResult_t init =
      ncclCommInitRankConfig(&joined, size, *join_id, rank, &non_blocking);
  if (init == ncclInProgress) init = SettleComm(joined, absl::Now() + timeout);
  if (init != ncclSuccess && joined != nullptr) ncclCommAbort(joined);
  if (init == ncclInProgress) {
    return absl::DeadlineExceededError(
        absl::StrCat("group ", key, ": not all ", size,
                     " members joined within ", absl::FormatDuration(timeout)));
  }
  if (init != ncclSuccess) {
    return NcclError(key, "initializing the communicator", init);
  }
  absl::StatusOr<ncclUniqueId> id =
      ShareUniqueId(store, key + "/nccl_unique_id", key, rank, timeout);
  if (!id.ok()) {
    ncclCommAbort(joined);
    return id.status();
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t blocking_init = ncclCommInitRank(&comm, size, *id, rank);
  // Only now has every member finished joining (a member leaves the joining
  // communicator only after this init, so none breaks another's join).
  ncclCommAbort(joined);
  if (blocking_init != ncclSuccess) {
    return NcclError(key, "initializing the communicator", blocking_init);
  }
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
          cudaSuccess ||
      cudaMalloc(&scratch, sizeof(float)) != cudaSuccess) {
    ncclCommAbort(comm);
    return absl::ResourceExhaustedError(absl::StrCat(
        "group ", key, ": ", cudaGetErrorString(cudaGetLastError())));
  }
  int device = 0;
  cudaGetDevice(&device);
  return std::unique_ptr<NcclCollectives>(new NcclCollectives(
      key, comm, stream, scratch, device, rank, size, timeout));
}

NcclCollectives::NcclCollectives(std::string name, ncclComm_t comm,
                                 cudaStream_t stream, float* scratch,
                                 int device, int rank, int size,
                                 absl::Duration timeout)
    : name_(std::move(name)),
      comm_(comm),
      stream_(stream),
      scratch_(scratch),
      device_(device),
      rank_(rank),
      size_(size),
      timeout_(timeout) {}

NcclCollectives::~NcclCollectives() {
  watch_.reset();  // its thread polls the communicator
  if (!aborted_) ncclCommDestroy(comm_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  cudaFree(scratch_);
  cudaStreamDestroy(stream_);
}

absl::Status NcclCollectives::Run(
    const char* what, const std::function<ncclResult_t()>& enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status usable = UsableLocked(what); !usable.ok()) return usable;
  const absl::Time deadline = absl::Now() + timeout_;
  ncclResult_t state = enqueue();
  if (state == ncclInProgress) state = SettleComm(comm_, deadline);
  return FinishLocked(what, state, deadline,
                      [this] { return cudaStreamQuery(stream_); });
}

absl::Status NcclCollectives::UsableLocked(const char* what) {
  if (aborted_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name_, ": ", what, " after the communicator was aborted"));
  }
  if (const cudaError_t set = cudaSetDevice(device_); set != cudaSuccess) {
    return absl::InternalError(absl::StrCat("group ", name_, ": ", what,
                                            ": selecting GPU ", device_, ": ",
                                            cudaGetErrorString(set)));
  }
  return absl::OkStatus();
}

absl::Status NcclCollectives::FinishLocked(
    const char* what, ncclResult_t state, absl::Time deadline,
    const std::function<cudaError_t()>& query) {
  cudaError_t done = cudaErrorNotReady;
  while (state == ncclSuccess && absl::Now() < deadline) {
    done = query();
    if (done != cudaErrorNotReady) break;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    std::this_thread::yield();
  }
  if (state == ncclSuccess && done == cudaSuccess) return absl::OkStatus();
  AbortLocked();
  if (state != ncclSuccess && state != ncclInProgress) {
    return NcclError(name_, what, state);
  }
  if (done != cudaErrorNotReady) {
    return absl::InternalError(absl::StrCat("group ", name_, ": ", what, ": ",
                                            cudaGetErrorString(done)));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("group ", name_, ": ", what, " did not finish within ",
                   absl::FormatDuration(timeout_)));
}

absl::Status NcclCollectives::AllReduce(float* data, int64_t count,
                                        ReduceOp op) {
  return Run("all-reduce", [&] {
    return ncclAllReduce(data, data, count, ncclFloat32, ToNccl(op), comm_,
                         stream_);
  });
}

absl::Status NcclCollectives::AllReduceSum(int64_t* data, int64_t count) {
  return Run("all-reduce", [&] {
    return ncclAllReduce(data, data, count, ncclInt64, ncclSum, comm_, stream_);
  });
}

absl::Status NcclCollectives::Broadcast(float* data, int64_t count, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", name_, ": broadcast root ", root,
                     " is not one of ", size_, " members"));
  }
  return Run("broadcast", [&] {
    return ncclBroadcast(data, data, count, ncclFloat32, root, comm_, stream_);
  });
}

absl::Status NcclCollectives::AllGather(const float* in, int64_t count,
                                        float* out) {
  return Run("all-gather", [&] {
    return ncclAllGather(in, out, count, ncclFloat32, comm_, stream_);
  });
}

absl::Status NcclCollectives::ReduceScatter(const float* in, int64_t count,
                                            float* out, ReduceOp op) {
  return Run("reduce-scatter", [&] {
    return ncclReduceScatter(in, out, count, ncclFloat32, ToNccl(op), comm_,
                             stream_);
  });
}

absl::Status NcclCollectives::CheckCounts(
    const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& recv_counts) const {
  if (static_cast<int>(send_counts.size()) != size_ ||
      static_cast<int>(recv_counts.size()) != size_) {
    return absl::InvalidArgumentError(absl::StrCat("group ", name_,
                                                   ": all-to-all needs ", size_,
                                                   " send and receive counts"));
  }
  return absl::OkStatus();
}

ncclResult_t NcclCollectives::EnqueueAllToAllV(
    const float* in, const std::vector<int64_t>& send_counts, float* out,
    const std::vector<int64_t>& recv_counts) {
  ncclResult_t result = ncclGroupStart();
  int64_t sent = 0, received = 0;
  for (int peer = 0; peer < size_ && result == ncclSuccess; ++peer) {
    result = ncclSend(in + sent, send_counts[peer], ncclFloat32, peer, comm_,
                      stream_);
    if (result == ncclSuccess) {
      result = ncclRecv(out + received, recv_counts[peer], ncclFloat32, peer,
                        comm_, stream_);
    }
    sent += send_counts[peer];
    received += recv_counts[peer];
  }
  const ncclResult_t ended = ncclGroupEnd();
  return result == ncclSuccess ? ended : result;
}

absl::Status NcclCollectives::AllToAllV(
    const float* in, const std::vector<int64_t>& send_counts, float* out,
    const std::vector<int64_t>& recv_counts) {
  if (absl::Status s = CheckCounts(send_counts, recv_counts); !s.ok()) {
    return s;
  }
  return Run("all-to-all", [&] {
    return EnqueueAllToAllV(in, send_counts, out, recv_counts);
  });
}

namespace {

// A queued exchange as the watch polls it: the event recorded after it.
class QueuedExchange : public WatchedWork {
 public:
  QueuedExchange(cudaEvent_t done,
                 std::function<absl::StatusOr<bool>(cudaEvent_t)> poll)
      : done_(done), poll_(std::move(poll)) {}
  ~QueuedExchange() override { cudaEventDestroy(done_); }
  absl::StatusOr<bool> Poll() override { return poll_(done_); }

 private:
  cudaEvent_t done_;
  std::function<absl::StatusOr<bool>(cudaEvent_t)> poll_;
};

// How often the watch polls a running exchange: often enough that a finished
// one leaves its event soon, rarely enough to cost the host nothing.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(1);

}  // namespace

absl::Status NcclCollectives::QueueAllToAllV(
    const float* in, const std::vector<int64_t>& send_counts, float* out,
    const std::vector<int64_t>& recv_counts, void* queue) {
  if (absl::Status s = CheckCounts(send_counts, recv_counts); !s.ok()) {
    return s;
  }
  if (queue == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", name_, ": a queued all-to-all needs the device's stream"));
  }
  const auto caller = static_cast<cudaStream_t>(queue);
  OrderedWorkWatch& watch = Watch();
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name_, ": all-to-all after the communicator was aborted",
        queued_failure_.ok()
            ? std::string()
            : absl::StrCat(" (", queued_failure_.message(), ")")));
  }
  auto cuda_error = [&](cudaError_t e) {
    AbortLocked();
    return absl::InternalError(absl::StrCat(
        "group ", name_, ": queuing an all-to-all: ", cudaGetErrorString(e)));
  };
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess && ready_ == nullptr) {
    e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
  }
  // The group's stream waits for the caller's work so far (a wait captures
  // the event's last record, so one event serves every call).
  if (e == cudaSuccess) e = cudaEventRecord(ready_, caller);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, ready_, 0);
  if (e != cudaSuccess) return cuda_error(e);
  if (const ncclResult_t r =
          EnqueueAllToAllV(in, send_counts, out, recv_counts);
      r != ncclSuccess) {
    AbortLocked();
    return NcclError(name_, "queuing an all-to-all", r);
  }
  cudaEvent_t done = nullptr;
  e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(done, stream_);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(caller, done, 0);
  if (e != cudaSuccess) {
    if (done != nullptr) cudaEventDestroy(done);
    return cuda_error(e);
  }
  watch.Add(std::make_unique<QueuedExchange>(
                done, [this](cudaEvent_t event) { return PollQueued(event); }),
            absl::StrCat("group ", name_, ": queued all-to-all ", ++queued_),
            absl::Now() + timeout_);
  return absl::OkStatus();
}

absl::StatusOr<bool> NcclCollectives::PollQueued(cudaEvent_t done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    return absl::AbortedError("the communicator was aborted");
  }
  cudaSetDevice(device_);
  const cudaError_t query = cudaEventQuery(done);
  if (query == cudaSuccess) return true;
  if (query != cudaErrorNotReady) {
    return absl::InternalError(cudaGetErrorString(query));
  }
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
      state != ncclSuccess && state != ncclInProgress) {
    return absl::InternalError(ncclGetErrorString(state));
  }
  return false;
}

void NcclCollectives::AbortLocked() {
  if (aborted_) return;
  ncclCommAbort(comm_);
  aborted_ = true;
}

void NcclCollectives::GiveUp(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_failure_.ok()) queued_failure_ = why;
  AbortLocked();
}

absl::Status NcclCollectives::QueuedFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_failure_;
}

OrderedWorkWatch& NcclCollectives::Watch() {
  if (watch_ == nullptr) {
    watch_ = std::make_unique<OrderedWorkWatch>(
        kWatchInterval, [this](const absl::Status& why) { GiveUp(why); });
  }
  return *watch_;
}

namespace {

// A send queued on the group's stream: Wait waits for the event recorded
// after it.
class QueuedSend : public PendingSend {
 public:
  QueuedSend(cudaEvent_t done, std::function<absl::Status(cudaEvent_t)> wait)
      : done_(done), wait_(std::move(wait)) {}
  ~QueuedSend() override { cudaEventDestroy(done_); }
  absl::Status Wait() override { return wait_(done_); }

 private:
  cudaEvent_t done_;
  std::function<absl::Status(cudaEvent_t)> wait_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PendingSend>> NcclCollectives::StartSend(
    const float* data, int64_t count, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status usable = UsableLocked("send"); !usable.ok()) return usable;
  if (const ncclResult_t r =
          ncclSend(data, count, ncclFloat32, peer, comm_, stream_);
      r != ncclSuccess) {
    AbortLocked();
    return NcclError(name_, "queuing a send", r);
  }
  cudaEvent_t done = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(done, stream_);
  if (e != cudaSuccess) {
    if (done != nullptr) cudaEventDestroy(done);
    AbortLocked();
    return absl::InternalError(absl::StrCat(
        "group ", name_, ": queuing a send: ", cudaGetErrorString(e)));
  }
  const absl::Time deadline = absl::Now() + timeout_;
  return std::unique_ptr<PendingSend>(
      new QueuedSend(done, [this, deadline](cudaEvent_t event) {
        std::lock_guard<std::mutex> lock(mu_);
        if (absl::Status usable = UsableLocked("send"); !usable.ok()) {
          return usable;
        }
        return FinishLocked("send", ncclSuccess, deadline,
                            [event] { return cudaEventQuery(event); });
      }));
}

absl::Status NcclCollectives::Recv(float* data, int64_t count, int peer) {
  return Run("receive", [&] {
    return ncclRecv(data, count, ncclFloat32, peer, comm_, stream_);
  });
}

absl::Status NcclCollectives::Barrier() {
  return Run("barrier", [&] {
    return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_,
                         stream_);
  });
}

}  // namespace glm
