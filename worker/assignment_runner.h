// The worker's life between registration and shutdown: take each assignment the
// coordinator pushes, run it, and report its metrics and result. Heartbeats
// carry the current job and iteration; a coordinator's "stop" (cancel, failure
// elsewhere) stops the running job after its current iteration. Rank 0, which
// holds the job's reduced losses, also writes each step to the job's metrics
// folder (TensorBoard events and JSON lines, beside its checkpoints).
#ifndef GLM_WORKER_ASSIGNMENT_RUNNER_H_
#define GLM_WORKER_ASSIGNMENT_RUNNER_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "jobspec/path_roots.h"
#include "proto/worker_service.pb.h"
#include "worker/coordinator_client.h"

namespace glm {

class AssignmentRunner {
 public:
  // `log` receives progress lines. Neither pointer is owned.
  // `device` is the worker's ("cpu" or "cuda:N"); `host` the address its
  // peers dial. An assignment whose spec names a path outside `path_roots`
  // (relative paths resolve against the working folder) fails before the
  // worker opens anything (jobspec/path_roots.h; empty: anywhere).
  AssignmentRunner(CoordinatorClient* client,
                   std::function<void(const std::string&)> log,
                   std::string device = "cpu", std::string host = "127.0.0.1",
                   PathRoots path_roots = {});

  // Heartbeats, then serves assignments until Shutdown (or the stream fails,
  // after which it reconnects with backoff). A coordinator that no longer
  // knows this worker (restarted, or declared it dead) gets it registered
  // again under a new id.
  void Serve();
  // Safe from any thread: stops the current job after its iteration and ends
  // Serve.
  void Shutdown();

 private:
  void Run(const v1::Assignment& assignment);
  // Trains the assignment's rank; its result.
  absl::Status Train(const v1::Assignment& assignment);
  // Registers again after `forgotten` (the watch's status) and logs it; false
  // when that failed (the coordinator is unreachable).
  bool RegisterAgain(const absl::Status& forgotten);

  CoordinatorClient* client_;
  std::function<void(const std::string&)> log_;
  std::string device_;
  std::string host_;
  const PathRoots path_roots_;
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> stop_job_{false};
};

}  // namespace glm

#endif  // GLM_WORKER_ASSIGNMENT_RUNNER_H_
