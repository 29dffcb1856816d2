// Gloo's rendezvous store on a KeyValueStore (for glm-worker, the
// coordinator's RendezvousService), so that the members of a group find each
// other's TCP addresses.
#ifndef GLM_PARALLEL_GLOO_STORE_H_
#define GLM_PARALLEL_GLOO_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "parallel/key_value_store.h"

namespace glm {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `store` is not owned. Gets and waits without their own timeout give up
  // after `timeout`; failures throw gloo::IoException, which Gloo's connect
  // passes on to its caller.
  GlooStore(KeyValueStore* store, absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key is set.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> WaitValues(const std::vector<std::string>& keys,
                                      absl::Duration timeout);

  KeyValueStore* store_;
  const absl::Duration timeout_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_GLOO_STORE_H_
