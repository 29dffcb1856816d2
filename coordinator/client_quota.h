// A bound on how many of something (open WatchJob streams) one client holds at
// once, so that one client cannot take every server thread. A client is the
// host it calls from: every token holder on a machine shares that machine's
// quota.
#ifndef GLM_COORDINATOR_CLIENT_QUOTA_H_
#define GLM_COORDINATOR_CLIENT_QUOTA_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace glm {

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": gRPC's peer without its port.
std::string ClientHost(const std::string& peer);

class ClientQuota {
 public:
  // `what` names the resource in refusals ("WatchJob streams"); `flag` the
  // setting that raised the limit.
  ClientQuota(int limit, std::string what, std::string flag);

  // Releases its slot when destroyed.
  class Slot {
   public:
    Slot(Slot&& other) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot();

   private:
    friend class ClientQuota;
    Slot(ClientQuota* quota, std::string client);
    ClientQuota* quota_;
    std::string client_;
  };

  // A slot for `client`, or RESOURCE_EXHAUSTED when it holds `limit` already.
  absl::StatusOr<Slot> Acquire(const std::string& client);
  int Held(const std::string& client);

 private:
  void Release(const std::string& client);

  const int limit_;
  const std::string what_;
  const std::string flag_;
  absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_CLIENT_QUOTA_H_
