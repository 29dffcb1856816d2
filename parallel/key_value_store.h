// Where the members of a process group find each other: a key-value store they
// all reach. Gloo's rendezvous and the NCCL unique-id exchange sit on top of
// it; glm-worker implements it on the coordinator's RendezvousService, tests in
// memory.
#ifndef GLM_PARALLEL_KEY_VALUE_STORE_H_
#define GLM_PARALLEL_KEY_VALUE_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glm {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // The values of every key once all are set; DEADLINE_EXCEEDED after
  // `timeout`.
  virtual absl::StatusOr<std::vector<std::string>> Wait(
      const std::vector<std::string>& keys, absl::Duration timeout) = 0;
};

}  // namespace glm

#endif  // GLM_PARALLEL_KEY_VALUE_STORE_H_
