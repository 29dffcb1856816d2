// Collectives over Gloo's TCP transport, for CPU workers. Members find each
// other through a Gloo store (GlooStore puts it on the coordinator).
#ifndef GLM_PARALLEL_GLOO_COLLECTIVES_H_
#define GLM_PARALLEL_GLOO_COLLECTIVES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/collectives.h"
#include "gloo/context.h"
#include "gloo/rendezvous/store.h"

namespace glm {

struct GlooOptions {
  // The address peers reach this process at.
  std::string hostname = "127.0.0.1";
  // Bounds connecting: every member must arrive within it.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Bounds every collective and send/receive once connected (a peer that
  // died closes its connections, which fails the call at once; this catches
  // one that hangs).
  absl::Duration timeout = absl::Minutes(30);
};

// Groups connected through `store` (shared by the groups it connects).
CollectivesFactory GlooFactory(std::shared_ptr<gloo::rendezvous::Store> store,
                               const GlooOptions& options);

class GlooCollectives : public Collectives {
 public:
  // Joins group `prefix` (a key prefix unique to the group within the store)
  // as member `rank` of `size`. DEADLINE_EXCEEDED or UNAVAILABLE, naming the
  // group, when the other members do not all arrive within the connect
  // timeout.
  static absl::StatusOr<std::unique_ptr<GlooCollectives>> Connect(
      gloo::rendezvous::Store& store, const std::string& prefix, int rank,
      int size, const GlooOptions& options);

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduceSum(int64_t* data, int64_t count) override;
  absl::Status Broadcast(float* data, int64_t count, int root) override;
  absl::Status AllGather(const float* in, int64_t count, float* out) override;
  absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                             ReduceOp op) override;
  absl::Status AllToAllV(const float* in,
                         const std::vector<int64_t>& send_counts, float* out,
                         const std::vector<int64_t>& recv_counts) override;
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float* data,
                                                         int64_t count,
                                                         int peer) override;
  absl::Status Recv(float* data, int64_t count, int peer) override;
  absl::Status Barrier() override;

 private:
  GlooCollectives(std::string name, std::shared_ptr<gloo::Context> context,
                  absl::Duration timeout);

  // Collectives are tagged in call order, which all members share.
  uint32_t NextTag() { return next_tag_++; }
  absl::Status CheckPeer(int peer) const;

  const std::string name_;
  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 0;
  // Point-to-point messages are numbered per peer and direction so that each
  // Recv matches the Send of the same number.
  std::map<int, uint32_t> sent_, received_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_GLOO_COLLECTIVES_H_
