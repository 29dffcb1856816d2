// A KeyValueStore in this process's memory, for process groups whose members
// are threads of one process (tests and single-host checks).
#ifndef GLM_PARALLEL_IN_MEMORY_STORE_H_
#define GLM_PARALLEL_IN_MEMORY_STORE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "parallel/key_value_store.h"

namespace glm {

class InMemoryStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Wait(
      const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_PARALLEL_IN_MEMORY_STORE_H_
