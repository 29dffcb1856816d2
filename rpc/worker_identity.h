// How a registered worker proves, on each call after RegisterWorker, that it
// is the worker it names: the id and secret the coordinator returned at
// registration, sent as call metadata. The worker token alone only lets a
// caller register.
#ifndef GLM_RPC_WORKER_IDENTITY_H_
#define GLM_RPC_WORKER_IDENTITY_H_

#include <string>

namespace glm {

inline constexpr char kWorkerIdHeader[] = "glm-worker-id";
inline constexpr char kWorkerSecretHeader[] = "glm-worker-secret";

struct WorkerIdentity {
  std::string id;
  std::string secret;
};

}  // namespace glm

#endif  // GLM_RPC_WORKER_IDENTITY_H_
