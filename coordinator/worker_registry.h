// The workers the coordinator knows: what each offers, when it last showed
// life, which job rank it holds, and the assignments waiting to be streamed to
// it.
#ifndef GLM_COORDINATOR_WORKER_REGISTRY_H_
#define GLM_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker_service.pb.h"
#include "rpc/worker_identity.h"

namespace glm {

// A job rank the scheduler gave a worker.
struct RankAssignment {
  std::string job_id;
  int attempt = 0;
  int rank = -1;
};

struct WorkerRecord {
  std::string id;
  // Presented with every call after registration (rpc/worker_identity.h).
  std::string secret;
  v1::RegisterWorkerRequest info;
  int64_t last_heartbeat_ms = 0;
  bool alive = true;
  // The job rank this worker holds; empty when idle.
  std::string job_id;
  int rank = -1;
  // Every rank assigned to this registration, including ended ones (a rank
  // of an ended attempt may still report until it has stopped).
  std::vector<RankAssignment> assignments;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(int64_t heartbeat_timeout_ms);

  int64_t heartbeat_timeout_ms() const { return heartbeat_timeout_ms_; }

  // A new worker, alive and idle as of `now_ms`, with a random id
  // ("worker-" and 32 hex digits) and secret drawn from a CSPRNG, so that
  // neither can be guessed from others (nor repeat across coordinator
  // starts).
  WorkerIdentity Register(const v1::RegisterWorkerRequest& request,
                          int64_t now_ms);
  // OK when `secret` is the one given to `worker_id` at registration;
  // NOT_FOUND for an unknown id (a worker forgotten by a coordinator restart
  // registers again on it), UNAUTHENTICATED for a wrong secret.
  absl::Status Authenticate(const std::string& worker_id,
                            const std::string& secret);
  // OK when `worker_id` was assigned `rank` of `job_id`'s `attempt`;
  // PERMISSION_DENIED naming what it holds otherwise.
  absl::Status CheckAssigned(const std::string& worker_id,
                             const std::string& job_id, int attempt, int rank);
  // As CheckAssigned, for any rank of any attempt of `job_id`.
  absl::Status CheckAssignedJob(const std::string& worker_id,
                                const std::string& job_id);
  // NOT_FOUND for an unknown id; FAILED_PRECONDITION for a worker already
  // declared dead (it must register again).
  absl::Status Heartbeat(const std::string& worker_id, int64_t now_ms);
  absl::StatusOr<WorkerRecord> Get(const std::string& worker_id);

  // The kind of every alive worker, in registration order.
  std::vector<v1::DeviceKind> AliveKinds();
  // Alive workers of `kind` holding no job, in registration order.
  std::vector<std::string> IdleWorkers(v1::DeviceKind kind);
  // Binds the worker to the assignment's job rank and queues the assignment for
  // it.
  void Assign(const std::string& worker_id, const v1::Assignment& assignment);
  // Removes the worker's queued assignment; false when it had none (it was
  // already streamed to the worker).
  bool WithdrawAssignment(const std::string& worker_id);
  // Makes the worker idle again (its job rank ended).
  void Release(const std::string& worker_id);
  // Forgets a worker that stopped, with any assignment queued for it, and
  // returns it as it was (with the job rank it held); NOT_FOUND for an
  // unknown id.
  absl::StatusOr<WorkerRecord> Remove(const std::string& worker_id);
  // The worker's next assignment; nullopt when none comes within `timeout`.
  std::optional<v1::Assignment> NextAssignment(const std::string& worker_id,
                                               absl::Duration timeout);

  // Declares dead every alive worker silent for longer than the heartbeat
  // timeout and returns them as they were (with the job rank they held).
  std::vector<WorkerRecord> ExpireSilent(int64_t now_ms);

  int RegisteredCount();
  int AliveCount();

 private:
  const int64_t heartbeat_timeout_ms_;
  absl::Mutex mu_;
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  // Keyed by registration number, so iteration is in registration order.
  std::map<int64_t, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> numbers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<v1::Assignment>> queued_
      ABSL_GUARDED_BY(mu_);

  WorkerRecord* Find(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_WORKER_REGISTRY_H_
