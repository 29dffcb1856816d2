// The coordinator's side of rendezvous: a key-value store per scope
// ("<job>/attempt-<n>") that ranks of one job attempt use to bootstrap Gloo and
// NCCL. In memory: an attempt whose coordinator restarts starts again with a
// new scope anyway.
#ifndef GLM_COORDINATOR_RENDEZVOUS_TABLE_H_
#define GLM_COORDINATOR_RENDEZVOUS_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace glm {

class RendezvousTable {
 public:
  void Set(const std::string& scope, const std::string& key,
           const std::string& value);
  std::optional<std::string> Get(const std::string& scope,
                                 const std::string& key);
  // The values of every key, in order, once all are set; DEADLINE_EXCEEDED
  // naming the missing keys when `timeout` passes first.
  absl::StatusOr<std::vector<std::string>> Wait(
      const std::string& scope, const std::vector<std::string>& keys,
      absl::Duration timeout);
  // Adds `delta` to the key's integer value (absent counts as 0) and returns
  // the sum; FAILED_PRECONDITION when the key holds something that is not an
  // integer, OUT_OF_RANGE (the key unchanged) when the sum is not an int64.
  absl::StatusOr<int64_t> Add(const std::string& scope, const std::string& key,
                              int64_t delta);
  // Forgets every key of a finished attempt.
  void DropScope(const std::string& scope);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> scopes_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_RENDEZVOUS_TABLE_H_
