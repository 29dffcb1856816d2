// A worker's rendezvous store: set/get/wait/add on the coordinator's
// RendezvousService within one job attempt's scope
// (Assignment.rendezvous.scope); the key-value store its process groups
// connect through.
#ifndef GLM_WORKER_RENDEZVOUS_STORE_H_
#define GLM_WORKER_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/key_value_store.h"
#include "proto/rendezvous_service.grpc.pb.h"
#include "rpc/client_connection.h"

namespace glm {

class RendezvousStore : public KeyValueStore {
 public:
  RendezvousStore(std::shared_ptr<ClientConnection> connection,
                  std::string scope);

  absl::Status Set(const std::string& key, const std::string& value) override;
  // nullopt when the key is not set.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  absl::StatusOr<std::vector<std::string>> Wait(
      const std::vector<std::string>& keys, absl::Duration timeout) override;
  // Atomically adds `delta` to an integer key and returns the new value.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);

 private:
  std::shared_ptr<ClientConnection> connection_;
  std::unique_ptr<v1::RendezvousService::Stub> stub_;
  const std::string scope_;
};

}  // namespace glm

#endif  // GLM_WORKER_RENDEZVOUS_STORE_H_
