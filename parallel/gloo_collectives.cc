#include "parallel/gloo_collectives.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace glm {
namespace {

// Point-to-point slots live apart from the collectives' slot prefixes.
constexpr uint8_t kPointToPointSlotPrefix = 0x50;

// Runs a Gloo call, turning its exceptions (timeouts, closed peers) into a
// status that names the group and the operation.
template <typename F>
absl::Status Guarded(const std::string& group, const char* what, F&& call) {
  try {
    call();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(
        absl::StrCat("group ", group, ": ", what, " failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("group ", group, ": ", what, " failed: ", e.what()));
  }
}

class GlooPendingSend : public PendingSend {
 public:
  GlooPendingSend(std::string group,
                  std::unique_ptr<gloo::transport::UnboundBuffer> buffer,
                  std::chrono::milliseconds timeout)
      : group_(std::move(group)),
        buffer_(std::move(buffer)),
        timeout_(timeout) {}

  absl::Status Wait() override {
    return Guarded(group_, "send", [&] { buffer_->waitSend(timeout_); });
  }

 private:
  const std::string group_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  const std::chrono::milliseconds timeout_;
};

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  gloo::sum<float>(out, a, b, n);
}

void SumInt64(void* out, const void* a, const void* b, size_t n) {
  gloo::sum<int64_t>(out, a, b, n);
}

}  // namespace

CollectivesFactory GlooFactory(std::shared_ptr<gloo::rendezvous::Store> store,
                               const GlooOptions& options) {
  return [store, options](
             const std::string& key, int rank,
             int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
    absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
        GlooCollectives::Connect(*store, key, rank, size, options);
    if (!group.ok()) return group.status();
    return std::unique_ptr<Collectives>(*std::move(group));
  };
}

absl::StatusOr<std::unique_ptr<GlooCollectives>> GlooCollectives::Connect(
    gloo::rendezvous::Store& store, const std::string& prefix, int rank,
    int size, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", prefix, ": rank ", rank, " is outside [0, ", size, ")"));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(absl::ToChronoMilliseconds(options.connect_timeout));
  absl::Status connected = Guarded(prefix, "connecting", [&] {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore group_store(prefix, store);
    context->connectFullMesh(group_store, device);
  });
  if (!connected.ok()) return connected;
  context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
  return std::unique_ptr<GlooCollectives>(
      new GlooCollectives(prefix, std::move(context), options.timeout));
}

GlooCollectives::GlooCollectives(std::string name,
                                 std::shared_ptr<gloo::Context> context,
                                 absl::Duration timeout)
    : name_(std::move(name)),
      context_(std::move(context)),
      timeout_(absl::ToChronoMilliseconds(timeout)) {}

absl::Status GlooCollectives::AllReduce(float* data, int64_t count,
                                        ReduceOp op) {
  absl::Status status = Guarded(name_, "all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(&SumFloats);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
  if (status.ok() && op == ReduceOp::kAverage) {
    const float inverse = 1.0f / static_cast<float>(size());
    std::for_each(data, data + count, [inverse](float& v) { v *= inverse; });
  }
  return status;
}

absl::Status GlooCollectives::AllReduceSum(int64_t* data, int64_t count) {
  return Guarded(name_, "all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(&SumInt64);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCollectives::Broadcast(float* data, int64_t count, int root) {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", name_, ": broadcast root ", root,
                     " is not one of ", size(), " members"));
  }
  return Guarded(name_, "broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data, count);
    opts.setRoot(root);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCollectives::AllGather(const float* in, int64_t count,
                                        float* out) {
  return Guarded(name_, "all-gather", [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(in), count);
    opts.setOutput(out, count * size());
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

// Gloo's reduce-scatter lacks the options-style API with timeouts, so this
// all-reduces and keeps this member's block: twice the traffic, same sums.
absl::Status GlooCollectives::ReduceScatter(const float* in, int64_t count,
                                            float* out, ReduceOp op) {
  std::vector<float> reduced(in, in + count * size());
  if (absl::Status status = AllReduce(reduced.data(), reduced.size(), op);
      !status.ok()) {
    return status;
  }
  std::copy_n(reduced.begin() + rank() * count, count, out);
  return absl::OkStatus();
}

absl::Status GlooCollectives::AllToAllV(
    const float* in, const std::vector<int64_t>& send_counts, float* out,
    const std::vector<int64_t>& recv_counts) {
  if (static_cast<int>(send_counts.size()) != size() ||
      static_cast<int>(recv_counts.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", name_, ": all-to-all needs ", size(),
                     " send and receive counts, got ", send_counts.size(),
                     " and ", recv_counts.size()));
  }
  return Guarded(name_, "all-to-all", [&] {
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(const_cast<float*>(in), send_counts);
    opts.setOutput(out, recv_counts);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  });
}

absl::StatusOr<std::unique_ptr<PendingSend>> GlooCollectives::StartSend(
    const float* data, int64_t count, int peer) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  absl::Status started = Guarded(name_, "send", [&] {
    buffer = context_->createUnboundBuffer(const_cast<float*>(data),
                                           count * sizeof(float));
    buffer->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, sent_[peer]));
  });
  if (!started.ok()) return started;
  ++sent_[peer];
  return std::unique_ptr<PendingSend>(
      new GlooPendingSend(name_, std::move(buffer), timeout_));
}

absl::Status GlooCollectives::Recv(float* data, int64_t count, int peer) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  return Guarded(name_, "receive", [&] {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(data, count * sizeof(float));
    buffer->recv(peer,
                 gloo::Slot::build(kPointToPointSlotPrefix, received_[peer]));
    ++received_[peer];
    buffer->waitRecv(timeout_);
  });
}

absl::Status GlooCollectives::Barrier() {
  return Guarded(name_, "barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

absl::Status GlooCollectives::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", name_, ": peer ", peer, " is not another of ",
                     size(), " members (this is ", rank(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace glm
